//! Fuzz target `topology_env`: arbitrary strings to the `NUMA_TOPOLOGY`
//! grammar parser (`VirtualLayout: FromStr`).
//!
//! Properties: parsing never panics (errors are typed and display without
//! panicking); any `Ok` layout prints (`Display`) to a canonical form that
//! parses back to an equal layout and prints identically again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numa_topology::VirtualLayout;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match text.parse::<VirtualLayout>() {
        Ok(layout) => {
            let shown = layout.to_string();
            let back: VirtualLayout = match shown.parse() {
                Ok(l) => l,
                Err(e) => panic!("{text:?} parsed, but its display form {shown:?} does not: {e}"),
            };
            assert_eq!(
                back, layout,
                "{text:?} -> {shown:?} parses to another layout"
            );
            assert_eq!(back.to_string(), shown, "display form is not canonical");
            assert!(layout.node_count() >= 1, "{text:?}: a layout without nodes");
        }
        Err(e) => {
            // The error names what was wrong; formatting it must not panic.
            let _ = e.to_string();
        }
    }
});
