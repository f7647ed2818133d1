//! Top-k selection: by absolute value with the sign kept (gate scores), and by value (label
//! logits). Ties break toward the lower index so results are deterministic.

use std::cmp::Ordering;

/// One scored feature of a layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Row index within the layer's gate region.
    pub feature: usize,
    /// The signed score (gate row · query).
    pub score: f32,
}

/// Ranking key of a score by magnitude: NaN ranks below everything.
#[inline]
fn magnitude(s: f32) -> f32 {
    if s.is_nan() {
        -1.0
    } else {
        s.abs()
    }
}

/// Orders `a` before `b` when it is larger by `key`, then by lower index.
#[inline]
fn rank(a: (usize, f32), b: (usize, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The `k` scores of largest magnitude, in descending magnitude, signs kept.
pub fn top_k_abs(scores: &[f32], k: usize) -> Vec<Hit> {
    let mut keyed: Vec<(usize, f32)> = scores
        .iter()
        .enumerate()
        .map(|(i, &s)| (i, magnitude(s)))
        .collect();
    select_sorted(&mut keyed, k);
    keyed
        .into_iter()
        .map(|(i, _)| Hit {
            feature: i,
            score: scores[i],
        })
        .collect()
}

/// Keeps the best `k` of `keyed` by `rank`, sorted.
fn select_sorted(keyed: &mut Vec<(usize, f32)>, k: usize) {
    let k = k.min(keyed.len());
    if k == 0 {
        keyed.clear();
        return;
    }
    if k < keyed.len() {
        keyed.select_nth_unstable_by(k - 1, |a, b| rank(*a, *b));
        keyed.truncate(k);
    }
    keyed.sort_by(|a, b| rank(*a, *b));
}

/// A bounded collector of the `k` largest `(id, score)` pairs by value, for streams too long
/// to keep (the vocabulary, in label computation).
#[derive(Debug, Clone)]
pub struct TopValues {
    k: usize,
    items: Vec<(u32, f32)>,
    /// Index of the smallest kept item (valid when `items.len() == k`).
    min_at: usize,
}

impl TopValues {
    pub fn new(k: usize) -> Self {
        TopValues {
            k,
            items: Vec::with_capacity(k),
            min_at: 0,
        }
    }

    /// The score an item must beat to enter (−∞ while not full).
    #[inline]
    pub fn threshold(&self) -> f32 {
        if self.items.len() < self.k {
            f32::NEG_INFINITY
        } else {
            self.items[self.min_at].1
        }
    }

    #[inline]
    fn worse(a: (u32, f32), b: (u32, f32)) -> bool {
        // a ranks below b: smaller score, or equal score and larger id.
        a.1 < b.1 || (a.1 == b.1 && a.0 > b.0)
    }

    #[inline]
    pub fn push(&mut self, id: u32, score: f32) {
        if self.k == 0 || score.is_nan() {
            return;
        }
        if self.items.len() < self.k {
            self.items.push((id, score));
            if self.items.len() == self.k {
                self.recompute_min();
            }
        } else if Self::worse(self.items[self.min_at], (id, score)) {
            self.items[self.min_at] = (id, score);
            self.recompute_min();
        }
    }

    fn recompute_min(&mut self) {
        let mut m = 0;
        for i in 1..self.items.len() {
            if Self::worse(self.items[i], self.items[m]) {
                m = i;
            }
        }
        self.min_at = m;
    }

    /// Merges another collector into this one.
    pub fn merge(&mut self, other: TopValues) {
        for (id, s) in other.items {
            self.push(id, s);
        }
    }

    /// The kept items, best first.
    pub fn into_sorted(mut self) -> Vec<(u32, f32)> {
        self.items
            .sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abs_top_keeps_sign_and_breaks_ties_by_index() {
        let s = [0.5, -3.0, 2.0, 3.0, f32::NAN, -0.1];
        let h = top_k_abs(&s, 3);
        assert_eq!(
            h.iter().map(|h| (h.feature, h.score)).collect::<Vec<_>>(),
            vec![(1, -3.0), (3, 3.0), (2, 2.0)]
        );
        assert_eq!(top_k_abs(&s, 0), vec![]);
        assert_eq!(top_k_abs(&s, 99).len(), 6);
        assert_eq!(top_k_abs(&s, 99)[5].feature, 4, "NaN ranks last");
    }

    #[test]
    fn top_values_matches_sort() {
        let xs: Vec<f32> = (0..500)
            .map(|i| ((i * 7919) % 503) as f32 - 250.0)
            .collect();
        let mut t = TopValues::new(7);
        for (i, &x) in xs.iter().enumerate() {
            t.push(i as u32, x);
        }
        let mut want: Vec<(u32, f32)> =
            xs.iter().enumerate().map(|(i, &x)| (i as u32, x)).collect();
        want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        want.truncate(7);
        assert_eq!(t.into_sorted(), want);
    }

    #[test]
    fn top_values_merge() {
        let mut a = TopValues::new(2);
        let mut b = TopValues::new(2);
        a.push(1, 1.0);
        a.push(2, 5.0);
        b.push(3, 4.0);
        b.push(4, 0.0);
        a.merge(b);
        assert_eq!(a.into_sorted(), vec![(2, 5.0), (3, 4.0)]);
    }
}
