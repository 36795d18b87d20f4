//! The Linux `cpulist` format (`0-3,8,10-11`), used by sysfs and by the
//! [`VirtualLayout`](crate::VirtualLayout) grammar. See `cpuset(7)`,
//! "List format".

use crate::MAX_CPUS;
use crate::error::CpuListError;
use std::fmt::Write as _;

/// Parses a non-empty list such as `0-3,8`. The result is sorted; a CPU
/// listed twice is an error. Whitespace is not allowed inside the list.
///
/// # Errors
/// [`CpuListError`] naming the first offending item.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, CpuListError> {
    let mut cpus = Vec::new();
    for item in text.split(',') {
        if item.is_empty() {
            return Err(CpuListError::EmptyItem);
        }
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (parse_cpu(a, item)?, parse_cpu(b, item)?),
            None => {
                let c = parse_cpu(item, item)?;
                (c, c)
            }
        };
        if first > last {
            return Err(CpuListError::ReversedRange { first, last });
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    if let Some(w) = cpus.windows(2).find(|w| w[0] == w[1]) {
        return Err(CpuListError::Duplicate { cpu: w[0] });
    }
    Ok(cpus)
}

fn parse_cpu(digits: &str, item: &str) -> Result<usize, CpuListError> {
    let not_a_number = || CpuListError::NotANumber {
        item: item.to_owned(),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(not_a_number());
    }
    // More than 9 digits cannot be below MAX_CPUS; avoid overflow in parse.
    if digits.trim_start_matches('0').len() > 9 {
        return Err(CpuListError::CpuTooLarge { cpu: usize::MAX });
    }
    let cpu: usize = digits.parse().map_err(|_| not_a_number())?;
    if cpu >= MAX_CPUS {
        return Err(CpuListError::CpuTooLarge { cpu });
    }
    Ok(cpu)
}

/// Formats a sorted, duplicate-free CPU list in the shortest `cpulist` form
/// (`0-3,8`). An empty slice gives the empty string.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11"),
            Ok(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Ok(vec![5]));
        assert_eq!(parse_cpu_list("9,1"), Ok(vec![1, 9]));
    }

    #[test]
    fn rejects_bad_items() {
        assert_eq!(parse_cpu_list(""), Err(CpuListError::EmptyItem));
        assert_eq!(parse_cpu_list("1,,2"), Err(CpuListError::EmptyItem));
        assert!(matches!(
            parse_cpu_list("1-"),
            Err(CpuListError::NotANumber { item }) if item == "1-"
        ));
        assert!(matches!(
            parse_cpu_list("+1"),
            Err(CpuListError::NotANumber { .. })
        ));
        assert!(matches!(
            parse_cpu_list(" 1"),
            Err(CpuListError::NotANumber { .. })
        ));
        assert_eq!(
            parse_cpu_list("4-2"),
            Err(CpuListError::ReversedRange { first: 4, last: 2 })
        );
        assert_eq!(
            parse_cpu_list("0-3,2"),
            Err(CpuListError::Duplicate { cpu: 2 })
        );
        assert_eq!(
            parse_cpu_list("8192"),
            Err(CpuListError::CpuTooLarge { cpu: 8192 })
        );
        assert!(matches!(
            parse_cpu_list("99999999999999999999999"),
            Err(CpuListError::CpuTooLarge { .. })
        ));
    }

    #[test]
    fn format_is_shortest_and_round_trips() {
        let cpus = vec![0, 1, 2, 3, 5, 7, 8];
        assert_eq!(format_cpu_list(&cpus), "0-3,5,7-8");
        assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)), Ok(cpus));
        assert_eq!(format_cpu_list(&[]), "");
    }
}
