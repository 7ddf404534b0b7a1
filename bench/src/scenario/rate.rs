//! How fast a scenario's publishers send: a closed loop or a fixed rate.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rate {
    /// Closed loop: at most `window` messages in flight per publisher.
    Max,
    /// Messages per second over all publishers.
    PerSec(f64),
}

impl std::str::FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Rate, String> {
        if s == "max" {
            return Ok(Rate::Max);
        }
        s.parse::<f64>()
            .ok()
            .filter(|r| *r > 0.0 && r.is_finite())
            .map(Rate::PerSec)
            .ok_or_else(|| format!("rate must be `max` or a positive number, not {s:?}"))
    }
}
