//! One layer's KV cache: the keys and values of each new row come in, in f32; they are
//! kept position-major, as f32 or rounded to f16 ([`KvType`]), and the attention kernels
//! read them back (widening f16 to f32 as they go).

use half::f16;

use crate::quant::KvElem;

/// How the KV cache stores keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    /// 4 bytes a value: the values exactly as computed.
    #[default]
    F32,
    /// 2 bytes a value (llama.cpp's default): half the memory per position, each value
    /// rounded to nearest f16 when stored; attention still computes in f32.
    F16,
}

impl KvType {
    /// The `--kv-cache` value: `f32` or `f16`.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
        }
    }
}

/// One layer's cache: positions of `kv_dim` values, position-major, in f32 or f16.
#[derive(Debug, Clone)]
pub(super) enum LayerCache {
    F32 { k: Vec<f32>, v: Vec<f32> },
    F16 { k: Vec<f16>, v: Vec<f16> },
}

impl LayerCache {
    pub(super) fn new(kv: KvType) -> Self {
        match kv {
            KvType::F32 => Self::F32 {
                k: Vec::new(),
                v: Vec::new(),
            },
            KvType::F16 => Self::F16 {
                k: Vec::new(),
                v: Vec::new(),
            },
        }
    }

    /// Appends the rows of `k` and `v`.
    pub(super) fn push(&mut self, k: &[f32], v: &[f32]) {
        match self {
            Self::F32 { k: ck, v: cv } => {
                ck.extend_from_slice(k);
                cv.extend_from_slice(v);
            }
            Self::F16 { k: ck, v: cv } => {
                f16::extend_from_f32(ck, k);
                f16::extend_from_f32(cv, v);
            }
        }
    }

    /// Values held (positions times `kv_dim`).
    pub(super) fn values(&self) -> usize {
        match self {
            Self::F32 { k, .. } => k.len(),
            Self::F16 { k, .. } => k.len(),
        }
    }

    /// Keeps the first `values` values of keys and of values (a shorter cache).
    pub(super) fn truncate(&mut self, values: usize) {
        match self {
            Self::F32 { k, v } => {
                k.truncate(values);
                v.truncate(values);
            }
            Self::F16 { k, v } => {
                k.truncate(values);
                v.truncate(values);
            }
        }
    }

    pub(super) fn clear(&mut self) {
        match self {
            Self::F32 { k, v } => {
                k.clear();
                v.clear();
            }
            Self::F16 { k, v } => {
                k.clear();
                v.clear();
            }
        }
    }
}
