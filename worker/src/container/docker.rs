//! Docker Engine through bollard (being written).
