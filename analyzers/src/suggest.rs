//! Concrete fixes: bucket sizes that cover churning dimensions with few graphs.

/// A padding scheme for one dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// Sizes to pad up to, ascending.
    pub sizes: Vec<i64>,
    /// Each observed size is padded to a multiple of this (0 when padding to the largest only).
    pub multiple: i64,
}

/// Chooses the fewest buckets that waste at most `max_waste` of the observed sizes' total,
/// trying "pad to the largest", then multiples of decreasing powers of two.
pub fn buckets(observed: &[i64]) -> Option<Buckets> {
    // Little waste first; a scheme that wastes more still beats one graph per size.
    [0.125, 0.25, 0.5]
        .into_iter()
        .find_map(|w| buckets_within(observed, w))
}

fn buckets_within(observed: &[i64], max_waste: f64) -> Option<Buckets> {
    let mut sizes: Vec<i64> = observed.iter().copied().filter(|&s| s > 0).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let max = *sizes.last()?;
    if sizes.len() < 2 {
        return None;
    }
    let total: i64 = sizes.iter().sum();
    let waste = |buckets: &[i64]| -> f64 {
        let w: i64 = sizes
            .iter()
            .map(|&s| buckets.iter().find(|&&b| b >= s).map_or(0, |&b| b - s))
            .sum();
        w as f64 / total as f64
    };
    if waste(&[max]) <= max_waste {
        return Some(Buckets {
            sizes: vec![max],
            multiple: 0,
        });
    }
    let mut best: Option<Buckets> = None;
    let mut m = 1i64 << 20;
    while m >= 1 {
        let mut b: Vec<i64> = sizes.iter().map(|&s| (s + m - 1) / m * m).collect();
        b.dedup();
        if b.len() < sizes.len() && waste(&b) <= max_waste {
            best = Some(Buckets {
                sizes: b,
                multiple: m,
            });
            break;
        }
        m /= 2;
    }
    best
}

/// `{96, 112}`.
pub fn set(v: &[i64]) -> String {
    format!(
        "{{{}}}",
        v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_sizes_pad_to_the_largest() {
        let b = buckets(&[120, 128, 124]).unwrap();
        assert_eq!(b.sizes, vec![128]);
    }

    #[test]
    fn spread_sizes_get_multiples() {
        let b = buckets(&[96, 100, 112, 128]).unwrap();
        assert!(b.sizes.len() < 4, "{b:?}");
        for s in [96, 100, 112, 128] {
            assert!(b.sizes.iter().any(|&x| x >= s));
        }
        let b = buckets(&[17, 33, 65, 129, 250]).unwrap();
        assert!(b.sizes.len() < 5, "{b:?}");
    }

    #[test]
    fn two_far_sizes_pad_to_the_larger() {
        assert_eq!(buckets(&[4, 8]).unwrap().sizes, vec![8]);
    }

    #[test]
    fn one_size_needs_no_buckets() {
        assert_eq!(buckets(&[64, 64]), None);
        assert_eq!(buckets(&[]), None);
    }
}
