//! Differential target for the hand-written elliptic-curve code: the
//! directory's batched, constant-time `k·Cᵢ` (`keymul.rs`: signed width-5
//! recoding, RCB tables made affine together, Jacobian main loop, one
//! shared inversion to serialize), the Straus multi-scalar multiplication
//! and its width-5 NAF (`dleq.rs`), and the whole fast BlindEvaluateBatch
//! against stock `voprf` (`ServerKey::evaluate_batch` against
//! `evaluate_batch_reference`). The reference is `p256`'s own
//! `ProjectivePoint` arithmetic; any mismatch is a finding. The functions
//! are `pub(crate)`; the crate exposes them under `#[cfg(fuzzing)]` as
//! `rdv_directory_client::fuzzing`.
//!
//! Input: a flags byte (bits 0 and 7 both set: a batch of 129 to 136
//! points, past the 128-point table slice; bit 1: also compare the whole
//! BlindEvaluateBatch with the reference, for batches of at most 8; bit 2
//! with it: send the first element in SEC1's compact form, `0x05 ‖ x`),
//! then the key `k`, then
//! the points, each with a scalar for the multi-scalar multiplication. A
//! scalar is a tag byte and its bytes: 0 raw 32 bytes reduced mod n, 1 a
//! small value, 2 n − small (−1, −2, …), 3 a run of one byte, 4 a run of
//! one base-32 digit (every recoded digit equal), 5 2^i ± small, 6
//! (n − 1)/2 ± small, 7 raw bytes negated. A point is a tag byte: 0 G·s
//! for a scalar s as above (G when s = 0), 1 hash-to-curve of up to 64
//! bytes, 2 the previous point negated, 3 the previous point again. Short
//! input reads as zeros. Past its eighth point a big batch adds one fixed
//! D = G·c to the previous point, and the reference k·Cᵢ₊₁ = k·Cᵢ + k·D is
//! summed the same way, so a big batch costs about one multiplication per
//! point (in `mul_serialize`) instead of three.
//!
//! Checked: `mul_serialize(k, Cs)` is refused for k = 0 and otherwise equals
//! `(Cᵢ·k).to_affine()` compressed, for every point; `recode(k)` and
//! `wnaf(k)` recompose to k with digits in range (wNAF: odd, |d| < 16, at
//! least 5 apart); `msm(sᵢ, Cᵢ)` equals `Σ Cᵢ·sᵢ`; the fast batch
//! evaluation is byte-identical to the reference for the same randomness
//! (both refuse the compact form; valid elements are never refused).
//! Run with `scripts/fuzz 120 keymul`.
#![no_main]

mod common;

use common::Mix;
use libfuzzer_sys::fuzz_target;
use p256::elliptic_curve::Field;
use p256::elliptic_curve::hash2curve::{ExpandMsgXmd, GroupDigest};
use p256::elliptic_curve::ops::Reduce;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::elliptic_curve::{Group, PrimeField};
use p256::{AffinePoint, FieldBytes, NistP256, ProjectivePoint, Scalar, U256};
use rdv_directory_client::fuzzing::{msm, mul_serialize, recode, wnaf};
use rdv_directory_client::oprf::ServerKey;
use sha2::Sha256;

/// The input, read front to back; zeros once it runs out.
struct In<'a>(&'a [u8]);

impl In<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        for b in out.iter_mut() {
            *b = self.u8();
        }
        out
    }

    fn scalar(&mut self) -> Scalar {
        let tag = self.u8() % 8;
        let small = Scalar::from(u64::from(self.u8()));
        match tag {
            0 => raw(self.bytes::<32>()),
            1 => small,
            2 => -small,
            3 => {
                let b = self.u8();
                let len = usize::from(self.u8() % 33);
                let mut x = [0u8; 32];
                x[32 - len..].fill(b);
                raw(x)
            }
            4 => {
                let d = Scalar::from(u64::from(self.u8() % 32));
                let len = self.u8() % 53;
                let mut acc = Scalar::ZERO;
                for _ in 0..len {
                    acc = acc * Scalar::from(32u64) + d;
                }
                acc
            }
            5 => {
                let p = Scalar::from(2u64).pow_vartime(&[u64::from(self.u8())]);
                if self.u8() & 1 == 0 {
                    p + small
                } else {
                    p - small
                }
            }
            6 => {
                let half = -Scalar::ONE * Scalar::from(2u64).invert().unwrap_or(Scalar::ONE);
                if self.u8() & 1 == 0 {
                    half + small
                } else {
                    half - small
                }
            }
            _ => -raw(self.bytes::<32>()),
        }
    }

    fn point(&mut self, prev: Option<ProjectivePoint>) -> ProjectivePoint {
        let prev = prev.unwrap_or(ProjectivePoint::GENERATOR);
        match self.u8() % 4 {
            0 => {
                let s = self.scalar();
                if bool::from(s.is_zero()) {
                    ProjectivePoint::GENERATOR
                } else {
                    ProjectivePoint::GENERATOR * s
                }
            }
            1 => {
                let len = usize::from(self.u8() % 65);
                let msg: Vec<u8> = (0..len).map(|_| self.u8()).collect();
                NistP256::hash_from_bytes::<ExpandMsgXmd<Sha256>>(&[&msg], &[b"rdv-fuzz-keymul"])
                    .unwrap_or(ProjectivePoint::GENERATOR)
            }
            2 => -prev,
            _ => prev,
        }
    }
}

/// 32 big-endian bytes reduced mod n.
fn raw(b: [u8; 32]) -> Scalar {
    <Scalar as Reduce<U256>>::reduce_bytes(&FieldBytes::from(b))
}

fn compressed(p: &ProjectivePoint) -> Vec<u8> {
    p.to_affine().to_encoded_point(true).as_bytes().to_vec()
}

fn signed(d: i64) -> Scalar {
    if d >= 0 {
        Scalar::from(d as u64)
    } else {
        -Scalar::from(d.unsigned_abs())
    }
}

fn check_recodings(k: &Scalar) {
    // keymul: 52 signed digits in [−16, 16], base 32.
    let mut back = Scalar::ZERO;
    for &(abs, neg) in recode(k).iter().rev() {
        assert!(abs <= 16, "recode digit {abs}");
        let d = Scalar::from(u64::from(abs));
        back = back * Scalar::from(32u64) + if bool::from(neg) { -d } else { d };
    }
    assert_eq!(back, *k, "recode does not recompose");
    // dleq: width-5 NAF.
    let naf = wnaf(k);
    let mut back = Scalar::ZERO;
    let mut last: Option<usize> = None;
    for (i, &d) in naf.iter().enumerate().rev() {
        back = back.double() + signed(i64::from(d));
        if d != 0 {
            assert!(d % 2 != 0 && d.unsigned_abs() < 16, "wnaf digit {d}");
            if let Some(j) = last {
                assert!(j - i >= 5, "wnaf digits {j} and {i} too close");
            }
            last = Some(i);
        }
    }
    assert_eq!(back, *k, "wnaf does not recompose");
}

fuzz_target!(|data: &[u8]| {
    let mut inp = In(data);
    let flags = inp.u8();
    let k = inp.scalar();
    check_recodings(&k);

    let big = flags & 0x81 == 0x81;
    let n = if big {
        129 + usize::from(inp.u8() % 8)
    } else {
        1 + usize::from(inp.u8() % 8)
    };
    let m = n.min(8);
    let mut points: Vec<ProjectivePoint> = Vec::with_capacity(n);
    let mut scalars: Vec<Scalar> = Vec::with_capacity(m);
    for _ in 0..m {
        let p = inp.point(points.last().copied());
        // The identity is refused before these functions are reached.
        points.push(if bool::from(p.is_identity()) {
            ProjectivePoint::GENERATOR
        } else {
            p
        });
        scalars.push(inp.scalar());
    }
    // The reference products: multiplied for the first eight points, then
    // summed along the big batch's steps of D.
    let mut want: Vec<ProjectivePoint> = points.iter().map(|p| *p * k).collect();
    if big {
        let d = ProjectivePoint::GENERATOR * Scalar::from(1 + u64::from(inp.u8()));
        let kd = d * k;
        while points.len() < n {
            let (p, w) = (points[points.len() - 1], want[want.len() - 1]);
            // A step onto the identity is skipped (the identity is refused
            // before these functions are reached).
            let (p, w) = if bool::from((p + d).is_identity()) {
                (p + d + d, w + kd + kd)
            } else {
                (p + d, w + kd)
            };
            points.push(p);
            want.push(w);
        }
    }
    let affine: Vec<AffinePoint> = points.iter().map(|p| p.to_affine()).collect();

    // Batched k·Cᵢ against p256.
    match mul_serialize(&k, &affine) {
        Ok(got) => {
            assert!(!bool::from(k.is_zero()), "k = 0 accepted");
            assert_eq!(got.len(), points.len());
            for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                assert_eq!(
                    compressed(w),
                    g.as_slice(),
                    "k·C[{i}] differs from p256 (k = {k:?}, {} points)",
                    points.len()
                );
            }
        }
        Err(e) => assert!(bool::from(k.is_zero()), "k ≠ 0 refused: {e}"),
    }

    // The multi-scalar multiplication against the sum of products.
    for s in &scalars {
        check_recodings(s);
    }
    let sum = points[..m]
        .iter()
        .zip(&scalars)
        .fold(ProjectivePoint::IDENTITY, |a, (p, s)| a + *p * s);
    assert_eq!(msm(&scalars, &affine[..m]), sum, "msm differs");

    // The whole fast BlindEvaluateBatch against voprf's.
    if flags & 2 != 0 && !big && !bool::from(k.is_zero()) {
        let key = ServerKey::from_secret(&k.to_repr()).expect("a non-zero scalar is a key");
        let mut blinded: Vec<Vec<u8>> = points.iter().map(compressed).collect();
        let compact = flags & 4 != 0;
        if compact {
            blinded[0][0] = 0x05;
        }
        let refs: Vec<&[u8]> = blinded.iter().map(Vec::as_slice).collect();
        let seed = u64::from_le_bytes(inp.bytes::<8>());
        let fast = key.evaluate_batch(&refs, &mut Mix(seed));
        let slow = key.evaluate_batch_reference(&refs, &mut Mix(seed));
        assert_eq!(fast, slow, "fast evaluation differs from voprf's");
        assert_eq!(
            fast.is_ok(),
            !compact,
            "compact form accepted or valid refused"
        );
    }
});
