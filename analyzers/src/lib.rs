//! Pure analyses over a decoded trace. Filled by the analyzer work (issue 3).
