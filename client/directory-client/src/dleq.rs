//! The server's BlindEvaluateBatch for RFC 9497 VOPRF, P256-SHA256, written
//! against the RFC text (§2.2.1 GenerateProof with ComputeCompositesFast,
//! §3.3.2 BlindEvaluate) so that a batch costs about one variable-base
//! scalar multiplication per element:
//!
//! - `Dᵢ = k·Cᵢ`: one constant-time multiplication per element (k is secret),
//!   the results normalized with one shared inversion ([`crate::keymul`]);
//! - `M = Σ dᵢ·Cᵢ`: one multi-scalar multiplication (Straus, width-5 wNAF,
//!   shared doublings). The `dᵢ` are hashes of public values and the `Cᵢ`
//!   are the request, so this step may run in variable time;
//! - `Z = k·M` (ComputeCompositesFast: the server knows k), then the proof
//!   `(c, s)` with `t2 = r·G`, `t3 = r·M`, `s = r − c·k`;
//!
//! The output is byte-identical to the generic algorithm (`voprf` 0.5's
//! `batch_blind_evaluate` given the same randomness), which the tests check,
//! and the client verifies it with stock `voprf`.

use p256::elliptic_curve::group::Group as _;
use p256::elliptic_curve::hash2curve::{ExpandMsgXmd, GroupDigest};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::elliptic_curve::{NonZeroScalar, PrimeField};
use p256::{AffinePoint, NistP256, ProjectivePoint, PublicKey, Scalar};
use rand_core::{CryptoRng, RngCore};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::oprf::{ELEMENT_LEN, PROOF_LEN};

/// contextString = "OPRFV1-" ‖ I2OSP(modeVOPRF = 0x01, 1) ‖ "-" ‖ "P256-SHA256".
const CONTEXT: &[u8] = b"OPRFV1-\x01-P256-SHA256";
/// I2OSP(Ne, 2): every serialized element is 33 bytes.
const NE: [u8; 2] = (ELEMENT_LEN as u16).to_be_bytes();

/// HashToScalar(x) with DST = "HashToScalar-" ‖ contextString (RFC 9497
/// §4.3: hash_to_field with expand_message_xmd/SHA-256, L = 48).
fn hash_to_scalar(msgs: &[&[u8]]) -> Result<Scalar> {
    NistP256::hash_to_scalar::<ExpandMsgXmd<Sha256>>(msgs, &[b"HashToScalar-", CONTEXT])
        .map_err(|_| Error::Batch("hash to scalar".into()))
}

/// SerializeElement: compressed SEC1. The identity has no serialization
/// (RFC 9497 §2.1); it cannot arise from valid inputs but is refused.
fn serialize(p: &AffinePoint) -> Result<[u8; ELEMENT_LEN]> {
    let ep = p.to_encoded_point(true);
    let mut out = [0u8; ELEMENT_LEN];
    if ep.as_bytes().len() != ELEMENT_LEN {
        return Err(Error::Batch("identity element".into()));
    }
    out.copy_from_slice(ep.as_bytes());
    Ok(out)
}

/// DeserializeElement: a compressed point on the curve, not the identity
/// (not SEC1's compact form, which `from_sec1_bytes` also reads).
pub(crate) fn deserialize(b: &[u8]) -> Result<AffinePoint> {
    if !crate::oprf::is_compressed(b) {
        return Err(Error::Encoding("blinded element"));
    }
    PublicKey::from_sec1_bytes(b)
        .map(|p| *p.as_affine())
        .map_err(|_| Error::Encoding("blinded element"))
}

/// The evaluated elements (serialized) and the proof c ‖ s.
pub(crate) type Evaluation = (Vec<Vec<u8>>, Vec<u8>);

/// BlindEvaluateBatch under private key `k` with public key `pk` (serialized
/// `pk_bytes`). `blinded` are serialized elements; any that does not decode
/// refuses the batch. The proof randomness is drawn as `voprf` 0.5 draws it
/// (a non-zero scalar by rejection sampling of 32 big-endian bytes), so the
/// RFC's Appendix A vectors replay with their `proof_random_scalar`.
pub(crate) fn blind_evaluate_batch(
    k: &NonZeroScalar<NistP256>,
    pk_bytes: &[u8; ELEMENT_LEN],
    blinded: &[&[u8]],
    rng: &mut (impl RngCore + CryptoRng),
) -> Result<Evaluation> {
    if blinded.is_empty() || blinded.len() > usize::from(u16::MAX) {
        return Err(Error::Batch("1 to 65535 elements".into()));
    }
    let k: Scalar = **k;
    let cs: Vec<AffinePoint> = blinded
        .iter()
        .map(|b| deserialize(b))
        .collect::<Result<_>>()?;
    // Dᵢ = k·Cᵢ, normalized together ([`crate::keymul`]).
    let ds_bytes = crate::keymul::mul_serialize(&k, &cs)?;

    // ComputeCompositesFast (§2.2.1).
    // seed = Hash(I2OSP(len(Bm), 2) ‖ Bm ‖ I2OSP(len(seedDST), 2) ‖ seedDST)
    let seed_dst_len = (b"Seed-".len() + CONTEXT.len()) as u16;
    let seed = Sha256::new()
        .chain_update(NE)
        .chain_update(pk_bytes)
        .chain_update(seed_dst_len.to_be_bytes())
        .chain_update(b"Seed-")
        .chain_update(CONTEXT)
        .finalize();
    let seed_len = (seed.len() as u16).to_be_bytes();
    let mut weights = Vec::with_capacity(cs.len());
    // SerializeElement(Cᵢ) is the request's bytes: a compressed point
    // decodes only from its one canonical encoding (x < p, tag 2 or 3).
    for (i, (ci, d)) in blinded.iter().zip(&ds_bytes).enumerate() {
        // i < 65536, checked above.
        let i = (i as u16).to_be_bytes();
        // di = HashToScalar(I2OSP(len(seed), 2) ‖ seed ‖ I2OSP(i, 2) ‖
        //   I2OSP(len(Ci), 2) ‖ Ci ‖ I2OSP(len(Di), 2) ‖ Di ‖ "Composite")
        weights.push(hash_to_scalar(&[
            &seed_len,
            &seed,
            &i,
            &NE,
            ci,
            &NE,
            d,
            b"Composite",
        ])?);
    }
    // In slices whose tables stay in cache (a 1,000-point table does not);
    // each slice costs one more chain of doublings, ~2 per element.
    let m = weights
        .chunks(MSM_SLICE)
        .zip(cs.chunks(MSM_SLICE))
        .map(|(w, c)| msm(w, c))
        .fold(ProjectivePoint::IDENTITY, |a, x| a + x);
    let z = m * k;

    // GenerateProof (§2.2.1), A = G, B = pkS.
    let r: Scalar = *NonZeroScalar::<NistP256>::random(rng);
    let t2 = ProjectivePoint::GENERATOR * r;
    let t3 = m * r;
    let a0 = serialize(&m.to_affine())?;
    let a1 = serialize(&z.to_affine())?;
    let a2 = serialize(&t2.to_affine())?;
    let a3 = serialize(&t3.to_affine())?;
    // c = HashToScalar(I2OSP(len(Bm), 2) ‖ Bm ‖ … ‖ I2OSP(len(a3), 2) ‖ a3 ‖ "Challenge")
    let c = hash_to_scalar(&[
        &NE,
        pk_bytes,
        &NE,
        &a0,
        &NE,
        &a1,
        &NE,
        &a2,
        &NE,
        &a3,
        b"Challenge",
    ])?;
    let s = r - c * k;
    let mut proof = Vec::with_capacity(PROOF_LEN);
    proof.extend_from_slice(&c.to_repr());
    proof.extend_from_slice(&s.to_repr());
    Ok((ds_bytes.iter().map(|d| d.to_vec()).collect(), proof))
}

/// Points per multi-scalar multiplication: 128 tables of 8 projective
/// points (~96 KiB) and their digits stay in a core's L2 cache.
const MSM_SLICE: usize = 128;

/// wNAF window width for the multi-scalar multiplication: 8 odd multiples
/// per point, about one addition per 6 bits.
const W: u32 = 5;
/// Digits: one per bit, plus one for the final carry.
const DIGITS: usize = 257;

/// The width-`W` non-adjacent form of a scalar, least significant digit
/// first: every digit is 0 or odd in (−2^(W−1), 2^(W−1)), and any two
/// non-zero digits are at least W positions apart. Variable time: only for
/// public scalars.
pub(crate) fn wnaf(s: &Scalar) -> [i8; DIGITS] {
    let be = s.to_repr();
    // Little-endian 64-bit limbs, plus one for the carry.
    let mut x = [0u64; 5];
    for (i, limb) in x.iter_mut().take(4).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&be[32 - 8 * (i + 1)..32 - 8 * i]);
        *limb = u64::from_be_bytes(b);
    }
    let mut out = [0i8; DIGITS];
    let width = 1i64 << W;
    for digit in out.iter_mut() {
        if x.iter().all(|&l| l == 0) {
            break;
        }
        if x[0] & 1 == 1 {
            let mut d = (x[0] & (width as u64 - 1)) as i64;
            if d >= width / 2 {
                d -= width;
            }
            *digit = d as i8;
            // x -= d (x + |d| when d < 0); x stays non-negative.
            if d > 0 {
                sub_small(&mut x, d as u64);
            } else {
                add_small(&mut x, (-d) as u64);
            }
        }
        // x >>= 1
        for i in 0..5 {
            x[i] = (x[i] >> 1) | if i < 4 { x[i + 1] << 63 } else { 0 };
        }
    }
    out
}

fn add_small(x: &mut [u64; 5], v: u64) {
    let mut carry = v;
    for l in x.iter_mut() {
        let (s, c) = l.overflowing_add(carry);
        *l = s;
        carry = u64::from(c);
        if carry == 0 {
            break;
        }
    }
}

fn sub_small(x: &mut [u64; 5], v: u64) {
    let mut borrow = v;
    for l in x.iter_mut() {
        let (s, b) = l.overflowing_sub(borrow);
        *l = s;
        borrow = u64::from(b);
        if borrow == 0 {
            break;
        }
    }
}

/// Σ sᵢ·Pᵢ by Straus's method with width-5 wNAF: a table of the odd
/// multiples P, 3P, …, 15P per point and one shared chain of doublings.
/// Variable time: only for public scalars and points.
pub(crate) fn msm(scalars: &[Scalar], points: &[AffinePoint]) -> ProjectivePoint {
    let half = 1usize << (W - 2);
    let tables: Vec<Vec<ProjectivePoint>> = points
        .iter()
        .map(|p| {
            let p = ProjectivePoint::from(*p);
            let p2 = p.double();
            let mut t = Vec::with_capacity(half);
            t.push(p);
            for i in 1..half {
                t.push(t[i - 1] + p2);
            }
            t
        })
        .collect();
    let nafs: Vec<[i8; DIGITS]> = scalars.iter().map(wnaf).collect();
    let top = nafs
        .iter()
        .filter_map(|n| n.iter().rposition(|&d| d != 0))
        .max();
    let Some(top) = top else {
        return ProjectivePoint::IDENTITY;
    };
    let mut acc = ProjectivePoint::IDENTITY;
    for i in (0..=top).rev() {
        acc = acc.double();
        for (naf, table) in nafs.iter().zip(&tables) {
            let d = naf[i];
            if d > 0 {
                acc += table[(d as usize) / 2];
            } else if d < 0 {
                acc -= table[(d.unsigned_abs() as usize) / 2];
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::elliptic_curve::Field;

    /// A deterministic generator for tests (SplitMix64).
    struct Mix(u64);
    impl RngCore for Mix {
        fn next_u32(&mut self) -> u32 {
            self.next_u64() as u32
        }
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            rand_core::impls::fill_bytes_via_next(self, dest)
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> std::result::Result<(), rand_core::Error> {
            self.fill_bytes(dest);
            Ok(())
        }
    }
    impl CryptoRng for Mix {}

    #[test]
    fn wnaf_recomposes_and_is_sparse() {
        let mut rng = Mix(1);
        let mut scalars = vec![Scalar::ZERO, Scalar::ONE, -Scalar::ONE, Scalar::from(31u64)];
        scalars.extend((0..50).map(|_| Scalar::random(&mut rng)));
        for s in scalars {
            let naf = wnaf(&s);
            let mut back = Scalar::ZERO;
            for &d in naf.iter().rev() {
                back = back.double();
                back += if d >= 0 {
                    Scalar::from(d as u64)
                } else {
                    -Scalar::from(u64::from(d.unsigned_abs()))
                };
            }
            assert_eq!(back, s);
            let nz: Vec<usize> = (0..DIGITS).filter(|&i| naf[i] != 0).collect();
            for w in nz.windows(2) {
                assert!(w[1] - w[0] >= W as usize, "digits too close");
            }
            assert!(
                nz.iter()
                    .all(|&i| naf[i] % 2 != 0 && naf[i].unsigned_abs() < 16)
            );
        }
    }

    #[test]
    fn msm_matches_sum_of_products() {
        let mut rng = Mix(2);
        for n in [1usize, 2, 7, 40] {
            let points: Vec<AffinePoint> = (0..n)
                .map(|_| (ProjectivePoint::GENERATOR * Scalar::random(&mut rng)).to_affine())
                .collect();
            let mut scalars: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
            scalars[0] = -Scalar::ONE;
            let want = points
                .iter()
                .zip(&scalars)
                .fold(ProjectivePoint::IDENTITY, |a, (p, s)| a + *p * s);
            assert_eq!(msm(&scalars, &points), want, "n = {n}");
        }
        let p = vec![AffinePoint::GENERATOR];
        assert_eq!(msm(&[Scalar::ZERO], &p), ProjectivePoint::IDENTITY);
    }
}
