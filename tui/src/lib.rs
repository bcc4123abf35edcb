//! Live terminal view. Filled by the live-view work (issue 4).
