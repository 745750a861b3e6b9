//! Distribution-free statistics for repeated benchmark runs.
//!
//! Run times on a shared machine are bimodal and heavy-tailed, so nothing here assumes a normal
//! distribution, and no interval reaches outside the values that were measured:
//!
//! - [`median_ci`]: the median of one transport's runs with an interval made of two order
//!   statistics, chosen from the binomial distribution (the classic sign-test interval).
//! - [`ratio_ci`]: the ratio of one transport to the baseline over *paired* runs (run `i` of
//!   both was taken in the same alternation round), as a Hodges–Lehmann estimate on log ratios
//!   with the Wilcoxon signed-rank interval.
//! - [`mann_whitney`] and [`shift_ci`]: two independent sets of runs (an old and a new JSON
//!   file), the rank-sum test's p-value and the two-sample Hodges–Lehmann ratio interval.
//!
//! Every interval is a 95% one when the run count allows it; with fewer runs it is the widest
//! one the data has (minimum to maximum), and its `level` says what coverage it really has.

/// The confidence every interval aims for.
pub const LEVEL: f64 = 0.95;

/// Median of `xs` (the mean of the two middle values when the count is even).
///
/// # Panics
/// If `xs` is empty.
pub fn median(xs: &[f64]) -> f64 {
    assert!(!xs.is_empty(), "median of no values");
    let s = sorted(xs);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// A median and its interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MedianCi {
    /// The sample median.
    pub median: f64,
    /// Lower bound: an order statistic, so never below the smallest run.
    pub lo: f64,
    /// Upper bound: an order statistic, so never above the largest run.
    pub hi: f64,
    /// The interval's actual coverage (at least [`LEVEL`] from 6 runs on).
    pub level: f64,
    /// Runs.
    pub n: usize,
}

/// The median of `xs` with a distribution-free interval `[x(k), x(n+1-k)]`: the largest `k`
/// whose coverage `1 - 2 P(Bin(n, 1/2) <= k-1)` is still at least 95% (the sign-test interval;
/// it holds for any continuous distribution). Under 6 runs no such `k` exists and the interval
/// is `[min, max]`, with its lower coverage in `level`.
///
/// # Panics
/// If `xs` is empty.
pub fn median_ci(xs: &[f64]) -> MedianCi {
    let s = sorted(xs);
    let n = s.len();
    let k = (1..=n.div_ceil(2))
        .take_while(|&k| binomial_half_cdf(n, k - 1) <= (1.0 - LEVEL) / 2.0)
        .last()
        .unwrap_or(1);
    MedianCi {
        median: median(&s),
        lo: s[k - 1],
        hi: s[n - k],
        level: 1.0 - 2.0 * binomial_half_cdf(n, k - 1),
        n,
    }
}

/// `P(Bin(n, 1/2) <= k)`, summed in the log domain so large `n` does not underflow.
fn binomial_half_cdf(n: usize, k: usize) -> f64 {
    let mut ln_p = -(n as f64) * std::f64::consts::LN_2;
    let mut sum = ln_p.exp();
    for i in 1..=k.min(n) {
        ln_p += ((n - i + 1) as f64 / i as f64).ln();
        sum += ln_p.exp();
    }
    sum.min(1.0)
}

/// A ratio (or any positive factor) with its interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioCi {
    /// The estimate.
    pub ratio: f64,
    /// Lower bound (> 0).
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// The interval's actual coverage.
    pub level: f64,
}

impl RatioCi {
    /// True when the interval excludes 1: the difference stands out of the noise.
    pub fn distinct(&self) -> bool {
        self.lo > 1.0 || self.hi < 1.0
    }

    /// The same ratio the other way up (`1 / ratio`, bounds swapped).
    pub fn inverted(&self) -> RatioCi {
        RatioCi {
            ratio: 1.0 / self.ratio,
            lo: 1.0 / self.hi,
            hi: 1.0 / self.lo,
            level: self.level,
        }
    }

    /// The interval's half width relative to the ratio (0.05 = within ±5%).
    pub fn relative_half_width(&self) -> f64 {
        ((self.ratio - self.lo) / self.ratio).max((self.hi - self.ratio) / self.ratio)
    }

    fn from_logs(estimate: f64, lo: f64, hi: f64, level: f64) -> RatioCi {
        RatioCi {
            ratio: estimate.exp(),
            lo: lo.exp(),
            hi: hi.exp(),
            level,
        }
    }
}

/// `this / base` over paired runs (`base[i]` and `this[i]` from the same alternation round).
///
/// Method: the Hodges–Lehmann estimate on log ratios. With `d_i = ln this_i - ln base_i`, the
/// estimate is the median of the Walsh averages `(d_i + d_j) / 2` (`i <= j`), and the interval
/// runs between two of them, cutting `c` from each end, where `c` comes from the exact
/// distribution of the Wilcoxon signed-rank statistic. Why this and not a bootstrap: it is exact
/// for any distribution whose paired log ratios are symmetric under "no difference" (true of an
/// A/A comparison, however bimodal or heavy-tailed the runs are), so the false-positive rate is
/// known at every run count, where a percentile bootstrap of medians covers too little with the
/// 5-10 runs a benchmark can afford. Working on log ratios makes the interval a ratio interval
/// with positive bounds, symmetric in which transport is called the baseline, and pairing uses
/// the alternation: a slow phase of the machine that hits both runs of a round cancels out.
///
/// Returns `None` when the counts differ, there are no runs, or a value is not positive (a
/// ratio of zeros means nothing).
pub fn ratio_ci(base: &[f64], this: &[f64]) -> Option<RatioCi> {
    if base.len() != this.len() || base.is_empty() || !all_positive(base) || !all_positive(this) {
        return None;
    }
    let d: Vec<f64> = base
        .iter()
        .zip(this)
        .map(|(b, t)| t.ln() - b.ln())
        .collect();
    let mut walsh = Vec::with_capacity(d.len() * (d.len() + 1) / 2);
    for i in 0..d.len() {
        for j in i..d.len() {
            walsh.push((d[i] + d[j]) / 2.0);
        }
    }
    let (c, level) = signed_rank_critical(d.len());
    Some(order_interval(walsh, c, level))
}

/// `new / old` over two independent sets of runs: the two-sample Hodges–Lehmann estimate (the
/// median of all `ln new_j - ln old_i`) with the interval from the exact Mann–Whitney
/// distribution (normal approximation above 30 runs a side). `None` as for [`ratio_ci`].
pub fn shift_ci(old: &[f64], new: &[f64]) -> Option<RatioCi> {
    if old.is_empty() || new.is_empty() || !all_positive(old) || !all_positive(new) {
        return None;
    }
    let diffs: Vec<f64> = old
        .iter()
        .flat_map(|o| new.iter().map(move |n| n.ln() - o.ln()))
        .collect();
    let (c, level) = match rank_sum_distribution(old.len(), new.len()) {
        Some(dist) => critical_count(&dist),
        None => normal_critical_count(old.len(), new.len()),
    };
    Some(order_interval(diffs, c, level))
}

fn all_positive(xs: &[f64]) -> bool {
    xs.iter().all(|&x| x > 0.0 && x.is_finite())
}

/// The median of `logs` and the interval that cuts `c` values from each end, as a ratio.
fn order_interval(mut logs: Vec<f64>, c: usize, level: f64) -> RatioCi {
    logs.sort_by(f64::total_cmp);
    let m = logs.len();
    let c = c.min((m - 1) / 2);
    RatioCi::from_logs(median(&logs), logs[c], logs[m - 1 - c], level)
}

/// How many values to cut from each end of the sorted estimates so that the rest is a 95%
/// interval, for a test statistic `S` with null probabilities `dist` (symmetric): the largest
/// `k` with `P(S <= k) <= 2.5%` (0, the whole range, if there is none), and the interval's
/// coverage `1 - 2 P(S <= k)`.
fn critical_count(dist: &[f64]) -> (usize, f64) {
    let mut cdf = dist[0]; // P(S <= k)
    let mut k = 0;
    while k + 1 < dist.len() && cdf + dist[k + 1] <= (1.0 - LEVEL) / 2.0 {
        k += 1;
        cdf += dist[k];
    }
    (k, 1.0 - 2.0 * cdf)
}

/// [`critical_count`] of the signed-rank statistic for `n` pairs, computed once per `n` and
/// thread (`--runs auto` and the simulations ask again and again).
fn signed_rank_critical(n: usize) -> (usize, f64) {
    thread_local! {
        static CACHE: std::cell::RefCell<std::collections::HashMap<usize, (usize, f64)>> =
            std::cell::RefCell::default();
    }
    CACHE.with(|c| {
        *c.borrow_mut()
            .entry(n)
            .or_insert_with(|| critical_count(&signed_rank_distribution(n)))
    })
}

/// `P(W+ = w)` for `w = 0 ..= n(n+1)/2`: the signed-rank statistic under the null.
fn signed_rank_distribution(n: usize) -> Vec<f64> {
    let max = n * (n + 1) / 2;
    let mut p = vec![0.0; max + 1];
    p[0] = 1.0;
    for rank in 1..=n {
        for w in (0..=rank * (rank + 1) / 2).rev() {
            let with = if w >= rank { p[w - rank] } else { 0.0 };
            p[w] = (p[w] + with) / 2.0;
        }
    }
    p
}

/// Largest group size for the exact rank-sum distribution (its table grows as `n m (n m)`).
const EXACT_RANK_SUM_MAX: usize = 30;

/// `P(U = u)` for `u = 0 ..= n m`: the Mann–Whitney statistic under the null, exactly (no
/// ties), or `None` when a group is larger than [`EXACT_RANK_SUM_MAX`].
fn rank_sum_distribution(n: usize, m: usize) -> Option<Vec<f64>> {
    if n > EXACT_RANK_SUM_MAX || m > EXACT_RANK_SUM_MAX {
        return None;
    }
    // f[i][j][u]: P(U = u) with i and j values; the largest of the i + j values belongs to the
    // first group with probability i / (i + j) and then beats all j others.
    let mut f = vec![vec![Vec::<f64>::new(); m + 1]; n + 1];
    for i in 0..=n {
        for j in 0..=m {
            f[i][j] = if i == 0 || j == 0 {
                vec![1.0]
            } else {
                let (pi, pj) = (i as f64 / (i + j) as f64, j as f64 / (i + j) as f64);
                (0..=i * j)
                    .map(|u| {
                        let a = u.checked_sub(j).and_then(|v| f[i - 1][j].get(v)).copied();
                        let b = f[i][j - 1].get(u).copied();
                        pi * a.unwrap_or(0.0) + pj * b.unwrap_or(0.0)
                    })
                    .collect()
            };
        }
    }
    Some(std::mem::take(&mut f[n][m]))
}

/// The normal approximation of [`critical_count`] for the rank-sum statistic.
fn normal_critical_count(n: usize, m: usize) -> (usize, f64) {
    let (nm, mean) = ((n * m) as f64, (n * m) as f64 / 2.0);
    let sd = (nm * (n + m + 1) as f64 / 12.0).sqrt();
    let k = (mean - Z975 * sd - 0.5).floor().max(0.0);
    let level = 1.0 - 2.0 * normal_cdf((k + 0.5 - mean) / sd);
    (k as usize, level)
}

/// The 97.5% quantile of the standard normal distribution.
const Z975: f64 = 1.959_963_984_540_054;

/// Two-sided p-value of the Mann–Whitney rank-sum test of `a` against `b`: exact when both
/// groups have at most 30 runs and no value ties, else the normal approximation with the tie
/// correction and a continuity correction. 1.0 when either group is empty.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> f64 {
    let (n, m) = (a.len(), b.len());
    if n == 0 || m == 0 {
        return 1.0;
    }
    let (u, ties) = rank_sum_u(a, b);
    let mean = (n * m) as f64 / 2.0;
    if ties.is_empty() {
        if let Some(dist) = rank_sum_distribution(n, m) {
            // P(U <= u) for the smaller tail, doubled.
            let k = u.min(n as f64 * m as f64 - u).floor() as usize;
            let tail: f64 = dist[..=k].iter().sum();
            return (2.0 * tail).min(1.0);
        }
    }
    let total = (n + m) as f64;
    let tie_term: f64 = ties.iter().map(|&t| (t * t * t - t) as f64).sum();
    let var = (n * m) as f64 / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)));
    if var <= 0.0 {
        return 1.0; // every value is the same
    }
    let z = ((u - mean).abs() - 0.5).max(0.0) / var.sqrt();
    (2.0 * (1.0 - normal_cdf(z))).min(1.0)
}

/// The Mann–Whitney U of `a` (midranks for ties) and the sizes of the tied groups.
fn rank_sum_u(a: &[f64], b: &[f64]) -> (f64, Vec<usize>) {
    let mut all: Vec<(f64, bool)> = a.iter().map(|&x| (x, true)).collect();
    all.extend(b.iter().map(|&x| (x, false)));
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (mut rank_sum_a, mut ties, mut i) = (0.0, Vec::new(), 0);
    while i < all.len() {
        let j = i + all[i..].iter().take_while(|v| v.0 == all[i].0).count();
        let midrank = (i + j + 1) as f64 / 2.0; // ranks i+1 ..= j
        rank_sum_a += midrank * all[i..j].iter().filter(|v| v.1).count() as f64;
        if j - i > 1 {
            ties.push(j - i);
        }
        i = j;
    }
    let n = a.len() as f64;
    (rank_sum_a - n * (n + 1.0) / 2.0, ties)
}

/// The standard normal distribution function, via `erfc` (Numerical Recipes' Chebyshev fit,
/// relative error below 1.2e-7).
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    //! The method proven on synthetic samples: no timed test anywhere.

    use super::*;

    /// splitmix64: a small deterministic generator, so every simulation gives the same numbers.
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform in (0, 1).
        fn uniform(&mut self) -> f64 {
            ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        fn normal(&mut self) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    /// A throughput run on this machine, as the README's tables show it: 70% in the fast mode
    /// around 1.0, 30% in a slow mode around 0.35, 3% lognormal noise within a mode, and one run
    /// in fifty hit by a heavy (Pareto, alpha 1) slowdown.
    fn machine_run(rng: &mut Rng, slow_phase: bool) -> f64 {
        let mode = if slow_phase { 0.35 } else { 1.0 };
        let mut x = mode * (0.03 * rng.normal()).exp();
        if rng.uniform() < 0.02 {
            x *= rng.uniform(); // divided by a Pareto(1) factor
        }
        x
    }

    /// `runs` alternating rounds of a baseline and a transport `factor` times faster. With
    /// `shared_phase` the machine's slow phase hits both runs of a round alike (how the README
    /// describes it); without, every run draws its own mode (the harder case).
    fn simulate(
        rng: &mut Rng,
        runs: usize,
        factor: f64,
        shared_phase: bool,
    ) -> (Vec<f64>, Vec<f64>) {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let phase = rng.uniform() < 0.3;
            let other = if shared_phase {
                phase
            } else {
                rng.uniform() < 0.3
            };
            a.push(machine_run(rng, phase));
            b.push(factor * machine_run(rng, other));
        }
        (a, b)
    }

    /// Fraction of 1000 simulated comparisons whose ratio interval excludes 1.
    fn distinct_rate(runs: usize, factor: f64, shared_phase: bool, seed: u64) -> f64 {
        let mut rng = Rng(seed);
        let hits = (0..1000)
            .filter(|_| {
                let (a, b) = simulate(&mut rng, runs, factor, shared_phase);
                ratio_ci(&a, &b).expect("positive samples").distinct()
            })
            .count();
        hits as f64 / 1000.0
    }

    /// The run count the README recommends and the benchmarks default to.
    const RECOMMENDED_RUNS: usize = crate::harness::RECOMMENDED_RUNS;

    #[test]
    fn aa_comparisons_call_3_to_7_percent_different() {
        for (runs, shared) in [
            (8, true),
            (RECOMMENDED_RUNS, true),
            (RECOMMENDED_RUNS, false),
            (20, false),
        ] {
            let rate = distinct_rate(runs, 1.0, shared, 42 + runs as u64);
            eprintln!(
                "A/A, {runs} runs, shared phase {shared}: {:.1}% called distinct",
                rate * 100.0
            );
            assert!(
                (0.03..=0.07).contains(&rate),
                "{runs} runs, shared {shared}: {rate}"
            );
        }
    }

    #[test]
    fn a_five_percent_shift_is_found_at_the_recommended_run_count() {
        for runs in [6, 8, 10, 12, 16] {
            let p = distinct_rate(runs, 1.05, true, 7);
            eprintln!(
                "5% shift, {runs} runs, shared phase: power {:.1}%",
                p * 100.0
            );
        }
        for runs in [12, 40, 80] {
            let p = distinct_rate(runs, 1.05, false, 7);
            eprintln!(
                "5% shift, {runs} runs, independent phases: power {:.1}%",
                p * 100.0
            );
        }
        // The quick suite's 6 runs, for larger differences.
        for factor in [1.10, 1.15, 1.20] {
            let p = distinct_rate(6, factor, true, 7);
            eprintln!("{factor}x, 6 runs, shared phase: power {:.1}%", p * 100.0);
        }
        let power = distinct_rate(RECOMMENDED_RUNS, 1.05, true, 7);
        assert!(power >= 0.80, "power {power}");
    }

    #[test]
    fn ratio_interval_is_never_negative_and_holds_the_estimate() {
        let mut rng = Rng(3);
        for runs in [1, 2, 3, 5, 10] {
            for _ in 0..200 {
                let (a, b) = simulate(&mut rng, runs, 1.3, false);
                let r = ratio_ci(&a, &b).unwrap();
                assert!(r.lo > 0.0 && r.lo <= r.ratio && r.ratio <= r.hi, "{r:?}");
                let inv = ratio_ci(&b, &a).unwrap();
                assert!((inv.ratio * r.ratio - 1.0).abs() < 1e-9, "{r:?} vs {inv:?}");
            }
        }
        assert_eq!(ratio_ci(&[1.0, 0.0], &[1.0, 1.0]), None);
        assert_eq!(ratio_ci(&[1.0], &[1.0, 1.0]), None);
    }

    #[test]
    fn median_interval_covers_about_95_percent() {
        // Exponential runs (skewed, like latencies); the true median is ln 2.
        let mut rng = Rng(11);
        for n in [6, 10, 25] {
            let mut covered = 0;
            for _ in 0..2000 {
                let xs: Vec<f64> = (0..n).map(|_| -rng.uniform().ln()).collect();
                let ci = median_ci(&xs);
                assert!(ci.lo >= 0.0 && ci.lo <= ci.median && ci.median <= ci.hi);
                covered +=
                    usize::from(ci.lo <= std::f64::consts::LN_2 && std::f64::consts::LN_2 <= ci.hi);
            }
            let rate = covered as f64 / 2000.0;
            let level = median_ci(&vec![1.0; n]).level;
            eprintln!("median CI, {n} runs: coverage {rate:.3} (nominal {level:.3})");
            assert!(
                (level - 0.03..=level + 0.03).contains(&rate),
                "{n}: {rate} vs {level}"
            );
            assert!(level >= LEVEL);
        }
    }

    #[test]
    fn median_interval_with_few_runs_is_the_range_and_says_so() {
        let ci = median_ci(&[3.0, 1.0, 2.0]);
        assert_eq!((ci.median, ci.lo, ci.hi), (2.0, 1.0, 3.0));
        assert!((ci.level - 0.75).abs() < 1e-12);
        let ci = median_ci(&[5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 10.0]);
        // n = 10: k = 2, coverage 1 - 2 * 11/1024.
        assert_eq!((ci.lo, ci.hi), (2.0, 9.0));
        assert!((ci.level - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
    }

    #[test]
    fn exact_distributions_sum_to_one_and_match_known_tables() {
        let sr = signed_rank_distribution(10);
        assert!((sr.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // Tables: n = 10, two-sided 5% critical value of W is 8.
        assert_eq!(critical_count(&sr).0, 8);
        let rs = rank_sum_distribution(5, 5).unwrap();
        assert!((rs.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // P(U <= 2) for 5 and 5 is 4 / 252.
        assert!((rs[..=2].iter().sum::<f64>() - 4.0 / 252.0).abs() < 1e-12);
        assert_eq!(critical_count(&rs).0, 2);
    }

    #[test]
    fn mann_whitney_separates_and_does_not_invent() {
        let a: Vec<f64> = (0..8).map(f64::from).collect();
        let b: Vec<f64> = (100..108).map(f64::from).collect();
        // Complete separation of 8 and 8: 2 / C(16, 8).
        assert!((mann_whitney(&a, &b) - 2.0 / 12870.0).abs() < 1e-12);
        assert!(mann_whitney(&a, &a) > 0.999);
        assert_eq!(mann_whitney(&[0.0; 5], &[0.0; 5]), 1.0);
        // Large groups use the normal approximation: same verdicts.
        let big_a: Vec<f64> = (0..40).map(f64::from).collect();
        let big_b: Vec<f64> = (0..40).map(|x| f64::from(x) + 30.0).collect();
        assert!(mann_whitney(&big_a, &big_b) < 1e-6);
        assert!(mann_whitney(&big_a, &big_a) > 0.9);
        assert!((normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
    }

    #[test]
    fn shift_interval_covers_a_known_shift() {
        let mut rng = Rng(5);
        let mut covered = 0;
        for _ in 0..500 {
            let old: Vec<f64> = (0..8).map(|_| (0.1 * rng.normal()).exp()).collect();
            let new: Vec<f64> = (0..8).map(|_| 1.2 * (0.1 * rng.normal()).exp()).collect();
            let r = shift_ci(&old, &new).unwrap();
            assert!(r.lo > 0.0);
            covered += usize::from(r.lo <= 1.2 && 1.2 <= r.hi);
        }
        assert!((450..=490).contains(&covered), "{covered} of 500");
    }
}
