//! The running machine, and the hwloc entry points in builds without hwloc.

use crate::error::TopologyError;
use crate::topology::Topology;

impl Topology {
    /// The running machine: hwloc with the `hwloc` feature, Linux sysfs
    /// without.
    ///
    /// # Errors
    /// [`TopologyError::Hwloc`], [`TopologyError::SysfsMissing`] or
    /// [`TopologyError::SysfsMalformed`] naming what could not be read;
    /// [`TopologyError::Unsupported`] off Linux without hwloc.
    pub fn system() -> Result<Self, TopologyError> {
        #[cfg(feature = "hwloc")]
        {
            Topology::from_hwloc()
        }
        #[cfg(all(
            not(feature = "hwloc"),
            any(target_os = "linux", target_os = "android")
        ))]
        {
            Topology::from_sysfs()
        }
        #[cfg(all(
            not(feature = "hwloc"),
            not(any(target_os = "linux", target_os = "android"))
        ))]
        {
            Err(TopologyError::Unsupported(
                "reading the topology without hwloc",
            ))
        }
    }
}

#[cfg(not(feature = "hwloc"))]
impl Topology {
    /// Needs the `hwloc` feature; without it always an error.
    ///
    /// # Errors
    /// [`TopologyError::NeedsHwloc`].
    pub fn from_xml_file(_path: impl AsRef<std::path::Path>) -> Result<Self, TopologyError> {
        Err(TopologyError::NeedsHwloc { what: "hwloc XML" })
    }

    /// Needs the `hwloc` feature; without it always an error.
    ///
    /// # Errors
    /// [`TopologyError::NeedsHwloc`].
    pub fn from_xml_str(_xml: &str) -> Result<Self, TopologyError> {
        Err(TopologyError::NeedsHwloc { what: "hwloc XML" })
    }

    /// Needs the `hwloc` feature; without it always an error.
    ///
    /// # Errors
    /// [`TopologyError::NeedsHwloc`].
    pub fn from_synthetic(_description: &str) -> Result<Self, TopologyError> {
        Err(TopologyError::NeedsHwloc {
            what: "an hwloc synthetic description",
        })
    }
}
