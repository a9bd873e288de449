"""Bitmask helpers on torch tensors, shared by the engine adapters (torch imported lazily)."""


def allocate(batch_size: int, vocab_size: int):
    """A CPU int32 bitmask, every token allowed (the engines fill it, then move it)."""
    import torch

    return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def apply_inplace(logits, bitmask) -> None:
    """Sets ``-inf`` on the logits of refused tokens, on the logits' device."""
    import torch

    bm = bitmask.to(logits.device, non_blocking=True)
    if bm.dim() == 1:
        bm = bm.unsqueeze(0)
    vocab = logits.shape[-1]
    shifts = torch.arange(32, device=bm.device, dtype=torch.int32)
    bits = ((bm.unsqueeze(-1) >> shifts) & 1).reshape(bm.shape[0], -1)
    allowed = torch.zeros((bm.shape[0], vocab), dtype=torch.bool, device=bm.device)
    n = min(vocab, bits.shape[1])
    allowed[:, :n] = bits[:, :n].bool()
    lg = logits if logits.dim() == 2 else logits.unsqueeze(0)
    lg.masked_fill_(~allowed[: lg.shape[0]], float("-inf"))
