//! weir-broker (in progress)
