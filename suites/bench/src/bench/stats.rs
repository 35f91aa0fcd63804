//! Median and spread of repeated samples.

use serde::Serialize;

/// Summary of repeated samples: median, min and max (spread = max - min), and the samples.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub samples: Vec<f64>,
}

impl Summary {
    /// Summarises `samples` (an empty list gives zeros).
    #[must_use]
    pub fn of(samples: &[f64]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => 0.0,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => f64::midpoint(sorted[n / 2 - 1], sorted[n / 2]),
        };
        Self {
            median,
            min: sorted.first().copied().unwrap_or_default(),
            max: sorted.last().copied().unwrap_or_default(),
            samples: samples.to_vec(),
        }
    }

    /// `median (min–max)` with `decimals` digits.
    #[must_use]
    pub fn show(&self, decimals: usize) -> String {
        format!(
            "{:.d$} ({:.d$}–{:.d$})",
            self.median,
            self.min,
            self.max,
            d = decimals
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Summary;

    #[test]
    fn median_of_odd_and_even_sample_counts() {
        assert!((Summary::of(&[3.0, 1.0, 2.0]).median - 2.0).abs() < f64::EPSILON);
        assert!((Summary::of(&[4.0, 1.0, 2.0, 3.0]).median - 2.5).abs() < f64::EPSILON);
        let s = Summary::of(&[5.0, 1.0]);
        assert!((s.min - 1.0).abs() < f64::EPSILON && (s.max - 5.0).abs() < f64::EPSILON);
    }
}
