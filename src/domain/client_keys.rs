//! The keys clients give the items they created offline in a sync request (inbox.md §5.3
//! step 2, scheduler.md §10.3): both services order them the same way.

use std::cmp::Ordering;

fn is_integer(key: &str) -> bool {
    let digits = key.strip_prefix('-').unwrap_or(key);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Numeric comparison of two integer texts of any size.
fn compare_integers(a: &str, b: &str) -> Ordering {
    let magnitude = |s: &str| -> (bool, String) {
        let (neg, digits) = match s.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, s),
        };
        let trimmed = digits.trim_start_matches('0').to_owned();
        (neg && !trimmed.is_empty(), trimmed)
    };
    let (an, am) = magnitude(a);
    let (bn, bm) = magnitude(b);
    let by_magnitude = am.len().cmp(&bm.len()).then_with(|| am.cmp(&bm));
    match (an, bn) {
        (false, false) => by_magnitude,
        (true, true) => by_magnitude.reverse(),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
    }
}

/// Sorts client keys as inbox.md §5.3 step 2: numerically when every key is an integer
/// (equal values by code points), else by code points.
pub fn order<T>(entries: &mut [(String, T)]) {
    if entries.iter().all(|(k, _)| is_integer(k)) {
        entries.sort_by(|(a, _), (b, _)| compare_integers(a, b).then_with(|| a.cmp(b)));
    } else {
        entries.sort_by(|(a, _), (b, _)| a.cmp(b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_orders() {
        let mut keys: Vec<(String, ())> = ["10", "9", "100", "2", "-3", "007", "7", "0"]
            .iter()
            .map(|k| (k.to_string(), ()))
            .collect();
        order(&mut keys);
        let got: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(got, ["-3", "0", "2", "007", "7", "9", "10", "100"]);
        let mut keys: Vec<(String, ())> = ["1", "2", "10", "x"].iter().map(|k| (k.to_string(), ())).collect();
        order(&mut keys);
        let got: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(got, ["1", "10", "2", "x"]);
        let huge = "123456789012345678901234567890";
        assert_eq!(compare_integers(huge, "99"), Ordering::Greater);
        assert_eq!(compare_integers("-5", "-40"), Ordering::Greater);
        assert_eq!(compare_integers("-0", "0"), Ordering::Equal);
    }
}
