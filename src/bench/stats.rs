//! The arithmetic the aggregates share (`summary`, `review`, `report`, `masks`): a leaf,
//! so that no two of them need each other for it.

/// `a / b`, NaN when `b` is 0 (a share of nothing is not 0%).
pub(super) fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

/// The value at quantile `p` (0 to 1) of `sorted`, the nearest rank; NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_nothing_is_not_a_number() {
        assert!(ratio(0, 0).is_nan());
        assert_eq!(ratio(1, 4), 0.25);
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&xs, 0.5), 3.0);
        assert_eq!(percentile(&xs, 0.99), 5.0);
        assert_eq!(percentile(&xs, 0.0), 1.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
