//! Durations on the command line and in the config: `500ms`, `2s`, `5m`, `1h`, `1m30s` (the
//! forms of the `humantime` crate), a bare number of seconds, at most [`MAX`].

use std::time::Duration;

/// The longest duration accepted anywhere (7 days). Every wait adds its duration to the clock;
/// a value beyond this is a typo, and one like `99999999999999h` would overflow that addition.
pub const MAX: Duration = Duration::from_hours(7 * 24);

/// Parses a duration such as `300s`, `5m`, `1m30s` or `250ms`. A bare number is seconds.
/// Anything above [`MAX`] (including values that overflow) is refused with one line.
pub fn parse(text: &str) -> Result<Duration, String> {
    let d = parse_unbounded(text)?;
    if d > MAX {
        return Err(format!(
            "duration {text:?} is too large (at most {}h)",
            MAX.as_secs() / 3600
        ));
    }
    Ok(d)
}

fn parse_unbounded(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let too_large = || format!("duration {text:?} is too large");
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map(Duration::from_secs).map_err(|_| too_large());
    }
    humantime::parse_duration(s).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => too_large(),
        _ if s.is_empty() => "empty duration".into(),
        _ => format!("invalid duration {text:?} (use e.g. 500ms, 30s, 5m, 1h)"),
    })
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
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn overflowing_or_huge_durations_are_refused_not_saturated() {
        for huge in [
            "99999999999999h",
            "99999999999999m",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999s",
            "18446744073709551615ms",
            "5124095576030431h",
            "9223372036854775807s1s",
            "169h",
        ] {
            let err = parse(huge).unwrap_err();
            assert!(err.contains("too large"), "{huge}: {err}");
            assert_eq!(err.lines().count(), 1);
        }
        assert_eq!(parse("168h"), Ok(MAX));
        assert_eq!(parse("604800"), Ok(MAX));
    }

    #[test]
    fn rejects_garbage_with_the_value_and_an_example() {
        for bad in ["", "s", "5x", "-1s", "1.5.1s", "m5"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("duration"), "{bad}: {err}");
        }
    }
}
