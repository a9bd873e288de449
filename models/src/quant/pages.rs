//! Weight buffers on huge pages. A decode step streams every weight once: 4 KB pages
//! mean one TLB miss per 4 KB read (on a virtual machine, a two-level page walk), which
//! 2 MB pages take away. Transparent huge pages are often `madvise`-only (the default of
//! many distributions), so a `Vec` the allocator hands out never gets them: [`zeroed`]
//! asks for them on a fresh buffer before anything is written to it, so the first
//! writes (the file's bytes) fault in 2 MB pages where the kernel has them, and 4 KB
//! pages where it does not. Nothing else changes: the buffer is an ordinary `Vec`.

/// The huge page size that [`zeroed`] aligns its request to.
const HUGE: usize = 2 << 20;

/// A zeroed buffer of `n` bytes, its whole 2 MB pages marked for transparent huge pages
/// (`MADV_HUGEPAGE`) before any is touched. Below 2 MB, or where the kernel says no,
/// an ordinary zeroed buffer.
pub fn zeroed(n: usize) -> Vec<u8> {
    // `vec![0; n]` of this size is a fresh anonymous mapping (calloc does not write
    // it), so the advice comes before its pages exist.
    let v = vec![0u8; n];
    if n >= 2 * HUGE {
        advise(&v);
    }
    v
}

#[cfg(target_os = "linux")]
fn advise(v: &[u8]) {
    let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
    let end = (v.as_ptr() as usize + v.len()) / HUGE * HUGE;
    if end > start {
        // SAFETY: the range lies inside `v`'s allocation; MADV_HUGEPAGE changes how its
        // pages are backed, never their contents. An error (THP off) is harmless.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_: &[u8]) {}

#[cfg(test)]
mod tests {
    #[test]
    fn a_buffer_is_zeroed_whatever_its_size() {
        for n in [0, 1, 4096, (2 << 20) * 3 + 17] {
            let v = super::zeroed(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&b| b == 0));
        }
    }
}
