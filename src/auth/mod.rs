//! Accounts, passwords, tokens, access keys, permissions and login rate limits.

pub mod flows;
pub mod passwords;
pub mod ratelimit;
pub mod tokens;

pub use ratelimit::{LoginLimiter, RegistrationLimiter};
pub use tokens::{Claims, TokenKeys};
