//! Offline GUI. Filled by the GUI work (issue 5).
