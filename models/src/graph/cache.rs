//! One layer's KV cache on the device: keys and values `(n_kv_head, capacity, head_dim)`
//! in f32 or f16 ([`KvType`]), of which the first `len` positions are held. New positions
//! are written in place (`Tensor::slice_set`); when they do not fit, the buffer is
//! reallocated at twice the size and the held positions copied once, so a cache of `n`
//! positions costs O(n) copies in all, not O(n) per token.
//!
//! The buffers are written in place, so a clone (a snapshot) must not share them: `Clone`
//! copies the held positions into fresh buffers. `truncate` only lowers `len`.

use candle_core::{DType, Result, Tensor};

use crate::llama::KvType;

/// The dtype a [`KvType`] stores on the device.
pub(super) fn dtype(kv: KvType) -> DType {
    match kv {
        KvType::F32 => DType::F32,
        KvType::F16 => DType::F16,
    }
}

#[derive(Debug)]
pub(super) struct LayerKv {
    kv: KvType,
    /// `(k, v)`, each `(n_kv_head, capacity, head_dim)`; `None` before the first feed.
    buf: Option<(Tensor, Tensor)>,
    len: usize,
}

impl Clone for LayerKv {
    fn clone(&self) -> Self {
        let copy = |t: &Tensor| -> Result<Tensor> { t.narrow(1, 0, self.len)?.copy() };
        let buf = match &self.buf {
            Some((k, v)) if self.len > 0 => match (copy(k), copy(v)) {
                (Ok(k), Ok(v)) => Some((k, v)),
                // A device that cannot allocate the copy: the snapshot starts empty, and its
                // next feed at the old length is refused (the runtime tracks the length).
                _ => None,
            },
            _ => None,
        };
        let len = if buf.is_some() { self.len } else { 0 };
        Self {
            kv: self.kv,
            buf,
            len,
        }
    }
}

impl LayerKv {
    pub(super) fn new(kv: KvType) -> Self {
        Self {
            kv,
            buf: None,
            len: 0,
        }
    }

    /// Appends `k` and `v` (`(n_kv_head, rows, head_dim)`, f32) at position `len`.
    pub(super) fn push(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
        let (heads, rows, hd) = k.dims3()?;
        let need = self.len + rows;
        let cap = self.buf.as_ref().map_or(0, |(k, _)| k.dim(1).unwrap_or(0));
        if need > cap {
            let new_cap = need.next_power_of_two().max(16);
            let dt = dtype(self.kv);
            let fresh = || Tensor::zeros((heads, new_cap, hd), dt, k.device());
            let (nk, nv) = (fresh()?, fresh()?);
            if let Some((ok, ov)) = &self.buf {
                if self.len > 0 {
                    nk.slice_set(&ok.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
                    nv.slice_set(&ov.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
                }
            }
            self.buf = Some((nk, nv));
        }
        let (bk, bv) = self.buf.as_ref().expect("allocated above");
        let dt = dtype(self.kv);
        bk.slice_set(&k.to_dtype(dt)?.contiguous()?, 1, self.len)?;
        bv.slice_set(&v.to_dtype(dt)?.contiguous()?, 1, self.len)?;
        self.len = need;
        Ok(())
    }

    /// Keys and values of positions `start..len`, f32, `(n_kv_head, len - start, head_dim)`.
    pub(super) fn view(&self, start: usize) -> Result<(Tensor, Tensor)> {
        let Some((k, v)) = &self.buf else {
            candle_core::bail!("attention over an empty KV cache");
        };
        let n = self.len - start;
        let (k, v) = (k.narrow(1, start, n)?, v.narrow(1, start, n)?);
        match self.kv {
            KvType::F32 => Ok((k, v)),
            KvType::F16 => Ok((k.to_dtype(DType::F32)?, v.to_dtype(DType::F32)?)),
        }
    }

    /// Keeps the first `len` positions (`len` at most the held length).
    pub(super) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    pub(super) fn clear(&mut self) {
        self.len = 0;
    }
}
