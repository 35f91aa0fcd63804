//! Durations on the command line and in the config: `500ms`, `2s`, `5m`, `1h`, `1m30s`.

use std::time::Duration;

/// Parses a duration such as `300s`, `5m`, `1m30s` or `250ms`. A bare number is seconds.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "invalid duration {text:?} (use e.g. 500ms, 30s, 5m, 1h)"
            ));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("duration {text:?} is too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => {
                return Err(format!(
                    "invalid duration {text:?} (use e.g. 500ms, 30s, 5m, 1h)"
                ));
            }
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(parse("300"), Ok(Duration::from_mins(5)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("5m"), Ok(Duration::from_mins(5)));
        assert_eq!(
            parse("1m30s"),
            Ok(Duration::from_mins(1) + Duration::from_secs(30))
        );
        assert_eq!(parse("1h"), Ok(Duration::from_hours(1)));
    }

    #[test]
    fn rejects_garbage_with_the_value_and_an_example() {
        for bad in ["", "s", "5x", "-1s", "1.5s", "m5"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("duration"), "{bad}: {err}");
        }
    }
}
