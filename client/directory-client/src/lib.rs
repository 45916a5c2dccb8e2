//! Client side of the Rendezvous discovery directory (SPEC §4.5, issue #3).
//!
//! The protocol modules (`oprf`, `seal`, `listing`, `lookup`, `wire`) are
//! pure: no sockets, clocks or global randomness, so they are tested with
//! vectors and shared with the server. [`http::DirectoryClient`] (feature
//! `http`) is the typed blocking client over them.

pub(crate) mod dleq;
pub mod error;
#[cfg(feature = "http")]
pub mod http;
pub(crate) mod keymul;
pub mod listing;
pub mod lookup;
pub mod oprf;
pub mod seal;
pub mod wire;

pub use error::{Error, Result};

/// The hand-written curve arithmetic, exposed to the fuzz targets only
/// (`cargo fuzz` builds with `--cfg fuzzing`; see
/// `client/directory-client/fuzz/fuzz_targets/keymul.rs`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    use p256::elliptic_curve::subtle::Choice;
    use p256::{AffinePoint, ProjectivePoint, Scalar};

    /// [`crate::keymul`]'s batched `k·Cᵢ`, serialized.
    pub fn mul_serialize(k: &Scalar, points: &[AffinePoint]) -> crate::Result<Vec<[u8; 33]>> {
        crate::keymul::mul_serialize(k, points)
    }

    /// [`crate::keymul`]'s signed width-5 digits of `k`, least significant first.
    pub fn recode(k: &Scalar) -> Vec<(u8, Choice)> {
        crate::keymul::recode(k).to_vec()
    }

    /// [`crate::dleq`]'s multi-scalar multiplication `Σ sᵢ·Pᵢ`.
    pub fn msm(scalars: &[Scalar], points: &[AffinePoint]) -> ProjectivePoint {
        crate::dleq::msm(scalars, points)
    }

    /// [`crate::dleq`]'s width-5 NAF of `s`, least significant digit first.
    pub fn wnaf(s: &Scalar) -> Vec<i8> {
        crate::dleq::wnaf(s).to_vec()
    }
}
#[cfg(feature = "http")]
pub use http::DirectoryClient;
pub use lookup::{Derived, Found, FoundCard};
