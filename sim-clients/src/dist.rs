//! Workload distributions.

use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};

/// The "empirical" task-size model of 001 Table 1: a lognormal body below `cut` bytes and a
/// bounded-Pareto tail from `cut` to `p`, joined as one density (the body holds the lognormal's
/// mass below `cut`, the tail the Pareto's mass above it; together they sum to 1 within 0.1%).
#[derive(Clone, Debug)]
pub struct EmpiricalSizes {
    pub mu: f64,
    pub sigma: f64,
    pub cut: f64,
    pub k: f64,
    pub alpha: f64,
    pub p: f64,
    body: LogNormal<f64>,
    body_mass: f64,
}

/// Standard normal CDF (Abramowitz-Stegun 7.1.26 on erf; error below 1.5e-7).
fn phi(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-z * z).exp();
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

impl EmpiricalSizes {
    /// 001 Table 1 exactly: μ 7.630, σ 1.001, cut 9020 B, k 631.44, α 1.0, p 10^10 B.
    pub fn paper() -> Self {
        Self::new(7.630, 1.001, 9020.0, 631.44, 1.0, 1e10)
    }

    /// The same shape with the tail bounded at `p` bytes (a lab serves files it can hold).
    pub fn with_max(p: f64) -> Self {
        let s = Self::paper();
        Self::new(s.mu, s.sigma, s.cut, s.k, s.alpha, p.max(s.cut * 2.0))
    }

    pub fn new(mu: f64, sigma: f64, cut: f64, k: f64, alpha: f64, p: f64) -> Self {
        let body = LogNormal::new(mu, sigma).expect("valid lognormal");
        let body_mass = phi((cut.ln() - mu) / sigma);
        EmpiricalSizes { mu, sigma, cut, k, alpha, p, body, body_mass }
    }

    /// Probability that a size falls in the lognormal body (below `cut`).
    pub fn body_mass(&self) -> f64 {
        self.body_mass
    }

    /// Probability of a size above `x` (x ≥ cut), in the model with the tail renormalised to
    /// the mass the body leaves.
    pub fn tail_survival(&self, x: f64) -> f64 {
        let (a, p) = (self.alpha, self.p);
        let x = x.clamp(self.cut, p);
        (1.0 - self.body_mass) * (x.powf(-a) - p.powf(-a)) / (self.cut.powf(-a) - p.powf(-a))
    }

    /// Draw a size in bytes (at least 1).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        if rng.random::<f64>() < self.body_mass {
            loop {
                let x: f64 = self.body.sample(rng);
                if x < self.cut {
                    return x.max(1.0) as u64;
                }
            }
        }
        // Inverse CDF of the bounded Pareto restricted to [cut, p].
        let (a, lo, hi) = (self.alpha, self.cut, self.p);
        let u: f64 = rng.random();
        let x = (lo.powf(-a) - u * (lo.powf(-a) - hi.powf(-a))).powf(-1.0 / a);
        x.clamp(lo, hi) as u64
    }
}

/// Negative-exponential think time (TPC-W), in seconds.
#[derive(Clone, Debug)]
pub struct ThinkTime(Exp<f64>);

impl ThinkTime {
    pub fn with_mean(mean_s: f64) -> Self {
        ThinkTime(Exp::new(1.0 / mean_s.max(1e-9)).expect("positive rate"))
    }
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        self.0.sample(rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn table_1_masses_add_up() {
        let d = EmpiricalSizes::paper();
        // Lognormal mass below 9020 B, and the Pareto tail mass of the paper's own density.
        let pareto_mass = d.k * (d.cut.powf(-1.0) - d.p.powf(-1.0)) / (1.0 - d.k / d.p);
        assert!((d.body_mass() - 0.930).abs() < 0.001, "{}", d.body_mass());
        assert!((d.body_mass() + pareto_mass - 1.0).abs() < 0.001);
    }

    #[test]
    fn samples_follow_the_model() {
        let d = EmpiricalSizes::paper();
        let mut rng = StdRng::seed_from_u64(7);
        let n = 200_000;
        let mut v: Vec<u64> = (0..n).map(|_| d.sample(&mut rng)).collect();
        v.sort_unstable();
        let below_cut = v.iter().filter(|x| (**x as f64) < d.cut).count() as f64 / n as f64;
        assert!((below_cut - d.body_mass()).abs() < 0.005, "{below_cut}");
        // The median sits in the body: the lognormal's median e^μ ≈ 2060 B.
        let median = v[n / 2] as f64;
        assert!((median / 7.630f64.exp() - 1.0).abs() < 0.03, "{median}");
        let above_1m = v.iter().filter(|x| **x > 1_000_000).count() as f64 / n as f64;
        assert!((above_1m - d.tail_survival(1e6)).abs() < 0.0003, "{above_1m} vs {}", d.tail_survival(1e6));
        assert!(v.iter().all(|x| *x >= 1 && (*x as f64) <= d.p));
    }

    #[test]
    fn bounded_tail_for_the_lab() {
        let d = EmpiricalSizes::with_max(2e6);
        let mut rng = StdRng::seed_from_u64(3);
        assert!((0..50_000).all(|_| d.sample(&mut rng) <= 2_000_000));
    }

    #[test]
    fn think_time_mean() {
        let t = ThinkTime::with_mean(7.0);
        let mut rng = StdRng::seed_from_u64(1);
        let n = 100_000;
        let mean: f64 = (0..n).map(|_| t.sample(&mut rng)).sum::<f64>() / n as f64;
        assert!((mean - 7.0).abs() < 0.1, "{mean}");
    }
}
