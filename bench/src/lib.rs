//! Placeholder until the load generator lands (issue 5).
