//! Everything unsafe: the PJRT ABI (`pjrt`), the exported `GetPjrtApi` and hooks (`hooks`),
//! Python stack capture (`python`), the agent's C entry points (`exports`), and libc (`os`).

pub mod os;
