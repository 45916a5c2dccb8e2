//! `Dᵢ = k·Cᵢ` for a whole batch under one secret key, serialized with one
//! shared field inversion (RFC 9497 §3.3.2 BlindEvaluate; the batch path of
//! [`crate::dleq`]).
//!
//! `p256` 0.13 keeps projective coordinates private and cannot normalize a
//! slice of points, so each `to_affine` costs a field inversion (~7% of a
//! multiplication). Here the arithmetic is our own over `p256`'s field
//! (`expose-field`), which lets a batch share its inversions (Montgomery's
//! trick) twice: once to make every point's table of 1·C … 16·C affine,
//! once to serialize the results. The tables are built with `p256`'s own
//! complete formulas (Renes–Costello–Batina 2015, Algorithms 4 and 6,
//! a = −3); the main loop runs in Jacobian coordinates (3M + 5S doublings,
//! 7M + 4S mixed additions, against 11M + 3S and 12M + 2S, plus
//! multiplications by b, for the complete formulas), which is what makes
//! it cheaper than `p256`'s own multiplication.
//!
//! Constant time in `k` (secret): signed width-5 digits (52 of them, each in
//! [−16, 16], recoded without branches), table entries selected by masks, a
//! masked negation, and the two exceptional sums (either side the
//! identity) replaced by masked selects; the others cannot occur (see
//! [`jadd_affine`]).

use p256::elliptic_curve::PrimeField;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::elliptic_curve::subtle::{Choice, ConditionallySelectable, ConstantTimeEq};
use p256::{AffinePoint, FieldBytes, FieldElement as Fe, Scalar};

use crate::error::{Error, Result};
use crate::oprf::ELEMENT_LEN;

/// The curve's b, big-endian (SEC 2 / NIST SP 800-186 §G.1.2).
const B_BYTES: [u8; 32] = [
    0x5a, 0xc6, 0x35, 0xd8, 0xaa, 0x3a, 0x93, 0xe7, 0xb3, 0xeb, 0xbd, 0x55, 0x76, 0x98, 0x86, 0xbc,
    0x65, 0x1d, 0x06, 0xb0, 0xcc, 0x53, 0xb0, 0xf6, 0x3b, 0xce, 0x3c, 0x3e, 0x27, 0xd2, 0x60, 0x4b,
];

/// Points whose tables are built at once: 128 × 16 affine entries (128 KiB).
const SLICE: usize = 128;

/// Digits of width 5: 52 × 5 = 260 bits cover a scalar and its last carry.
const DIGITS: usize = 52;

#[derive(Clone, Copy)]
struct P {
    x: Fe,
    y: Fe,
    z: Fe,
}

/// Complete addition, a = −3 (RCB 2015 Algorithm 4).
fn add(l: &P, r: &P, b: &Fe) -> P {
    let xx = l.x * r.x;
    let yy = l.y * r.y;
    let zz = l.z * r.z;
    let xy_pairs = ((l.x + l.y) * (r.x + r.y)) - (xx + yy);
    let yz_pairs = ((l.y + l.z) * (r.y + r.z)) - (yy + zz);
    let xz_pairs = ((l.x + l.z) * (r.x + r.z)) - (xx + zz);
    let bzz_part = xz_pairs - (*b * zz);
    let bzz3_part = bzz_part.double() + bzz_part;
    let yy_m_bzz3 = yy - bzz3_part;
    let yy_p_bzz3 = yy + bzz3_part;
    let zz3 = zz.double() + zz;
    let bxz_part = (*b * xz_pairs) - (zz3 + xx);
    let bxz3_part = bxz_part.double() + bxz_part;
    let xx3_m_zz3 = xx.double() + xx - zz3;
    P {
        x: (yy_p_bzz3 * xy_pairs) - (yz_pairs * bxz3_part),
        y: (yy_p_bzz3 * yy_m_bzz3) + (xx3_m_zz3 * bxz3_part),
        z: (yy_m_bzz3 * yz_pairs) + (xy_pairs * xx3_m_zz3),
    }
}

/// Exception-free doubling, a = −3 (RCB 2015 Algorithm 6).
fn double(p: &P, b: &Fe) -> P {
    let xx = p.x.square();
    let yy = p.y.square();
    let zz = p.z.square();
    let xy2 = (p.x * p.y).double();
    let xz2 = (p.x * p.z).double();
    let bzz_part = (*b * zz) - xz2;
    let bzz3_part = bzz_part.double() + bzz_part;
    let yy_m_bzz3 = yy - bzz3_part;
    let yy_p_bzz3 = yy + bzz3_part;
    let y_frag = yy_p_bzz3 * yy_m_bzz3;
    let x_frag = yy_m_bzz3 * xy2;
    let zz3 = zz.double() + zz;
    let bxz2_part = (*b * xz2) - (zz3 + xx);
    let bxz6_part = bxz2_part.double() + bxz2_part;
    let xx3_m_zz3 = xx.double() + xx - zz3;
    let y = y_frag + (xx3_m_zz3 * bxz6_part);
    let yz2 = (p.y * p.z).double();
    let x = x_frag - (bxz6_part * yz2);
    let z = (yz2 * yy).double().double();
    P { x, y, z }
}

/// `k` as 52 signed digits `dᵢ` in [−16, 16] with `k = Σ dᵢ·32ⁱ`, as
/// (|dᵢ|, dᵢ < 0). Branch-free: `k` is secret.
pub(crate) fn recode(k: &Scalar) -> [(u8, Choice); DIGITS] {
    let be = k.to_repr();
    let mut le = [0u8; 33];
    for (i, b) in be.iter().rev().enumerate() {
        le[i] = *b;
    }
    let mut out = [(0u8, Choice::from(0)); DIGITS];
    let mut carry = 0u32;
    for (i, slot) in out.iter_mut().enumerate() {
        let bit = 5 * i;
        let (byte, shift) = (bit / 8, bit % 8);
        let two = u32::from(le[byte]) | (u32::from(le.get(byte + 1).copied().unwrap_or(0)) << 8);
        let w = ((two >> shift) & 31) + carry;
        // w ≤ 16 stays; w ≥ 17 becomes w − 32 with a carry.
        carry = (w + 15) >> 5;
        let d = w as i32 - (carry << 5) as i32;
        let neg = (d >> 31) as u32 & 1;
        let abs = ((d ^ -(neg as i32)) + neg as i32) as u8;
        *slot = (abs, Choice::from(neg as u8));
    }
    out
}

/// An affine table entry `(x, y)`.
#[derive(Clone, Copy)]
struct A {
    x: Fe,
    y: Fe,
}

impl ConditionallySelectable for A {
    fn conditional_select(a: &Self, b: &Self, c: Choice) -> Self {
        Self {
            x: Fe::conditional_select(&a.x, &b.x, c),
            y: Fe::conditional_select(&a.y, &b.y, c),
        }
    }
}

/// Selects `|d|·C` from `table` (1·C … 16·C, affine) in constant time,
/// negated when `neg`; the second value is set when `d = 0` (the identity,
/// which an affine entry cannot hold).
fn select(table: &[A], abs: u8, neg: Choice) -> (A, Choice) {
    let mut t = table[0];
    for (j, e) in table.iter().enumerate().skip(1) {
        t.conditional_assign(e, abs.ct_eq(&(j as u8 + 1)));
    }
    t.y = Fe::conditional_select(&t.y, &-t.y, neg);
    (t, abs.ct_eq(&0))
}

/// A point in Jacobian coordinates, (X/Z², Y/Z³); Z = 0 is the identity.
#[derive(Clone, Copy)]
struct J {
    x: Fe,
    y: Fe,
    z: Fe,
}

impl ConditionallySelectable for J {
    fn conditional_select(a: &Self, b: &Self, c: Choice) -> Self {
        Self {
            x: Fe::conditional_select(&a.x, &b.x, c),
            y: Fe::conditional_select(&a.y, &b.y, c),
            z: Fe::conditional_select(&a.z, &b.z, c),
        }
    }
}

/// Doubling, a = −3 ("dbl-2001-b", 3M + 5S). The identity (Z = 0) stays
/// the identity; P-256 has no point of order 2, so nothing else is
/// exceptional.
fn jdouble(p: &J) -> J {
    let delta = p.z.square();
    let gamma = p.y.square();
    let beta4 = (p.x * gamma).double().double();
    let t = (p.x - delta) * (p.x + delta);
    let alpha = t.double() + t;
    let x = alpha.square() - beta4.double();
    let z = (p.y + p.z).square() - gamma - delta;
    let y = alpha * (beta4 - x) - gamma.square().double().double().double();
    J { x, y, z }
}

/// `q + t` with `t` affine ("madd-2007-bl", 7M + 4S), exceptions masked:
/// `t` the identity (`t_id`) gives `q`; `q` the identity gives `t`. The
/// others, `q = ±t`, cannot occur in [`mul`]: there `q = 32·m·C` where
/// `m ≥ 0` is the value of the digits above (`m = 0` is the identity) and
/// `t = d·C` with `|d| ≤ 16`. Before the last digit `32·m` is far below the
/// group order n, so `32·m = ±d` would need `m = 0`; at the last digit
/// `32·m + d = k` with `0 < k < n`, so `32·m ≡ −d` would make k ≡ 0, and
/// `32·m ≡ d` needs `k = 2d` (then `m = 0`) or `32·m = n − |d|`, impossible
/// since n ≡ 17 (mod 32) and a negative digit has `|d| ≤ 15`.
fn jadd_affine(q: &J, t: &A, t_id: Choice) -> J {
    let z1z1 = q.z.square();
    let u2 = t.x * z1z1;
    let s2 = t.y * q.z * z1z1;
    let h = u2 - q.x;
    let hh = h.square();
    let i = hh.double().double();
    let j = h * i;
    let r = (s2 - q.y).double();
    let v = q.x * i;
    let x = r.square() - j - v.double();
    let y = r * (v - x) - (q.y * j).double();
    let z = (q.z + h).square() - z1z1 - hh;
    let sum = J { x, y, z };
    let lifted = J {
        x: t.x,
        y: t.y,
        z: Fe::ONE,
    };
    let out = J::conditional_select(&sum, &lifted, q.z.is_zero());
    J::conditional_select(&out, q, t_id)
}

/// 1·C … 16·C for every point, in homogeneous coordinates with the
/// complete formulas, then made affine together (one inversion).
fn tables(points: &[P], b: &Fe) -> Result<Vec<A>> {
    let mut all: Vec<P> = Vec::with_capacity(16 * points.len());
    for c in points {
        let start = all.len();
        all.push(*c);
        for j in 1..16 {
            // (j+1)·C: a doubling for even multiples, an addition for odd ones.
            let e = if j % 2 == 1 {
                double(&all[start + j / 2], b)
            } else {
                add(&all[start + j - 1], c, b)
            };
            all.push(e);
        }
    }
    let zinv = batch_invert(&all.iter().map(|p| p.z).collect::<Vec<_>>())?;
    Ok(all
        .iter()
        .zip(zinv)
        .map(|(p, zi)| A {
            x: p.x * zi,
            y: p.y * zi,
        })
        .collect())
}

/// Every inverse, by Montgomery's trick: prefix products, one inversion,
/// then back down. Refuses a zero (the identity: not reachable here).
fn batch_invert(v: &[Fe]) -> Result<Vec<Fe>> {
    let mut prefix = Vec::with_capacity(v.len());
    let mut acc = Fe::ONE;
    for z in v {
        prefix.push(acc);
        acc *= z;
    }
    let mut inv =
        Option::<Fe>::from(acc.invert()).ok_or_else(|| Error::Batch("identity element".into()))?;
    let mut out = vec![Fe::ZERO; v.len()];
    for i in (0..v.len()).rev() {
        out[i] = inv * prefix[i];
        inv *= v[i];
    }
    Ok(out)
}

fn mul(table: &[A], digits: &[(u8, Choice); DIGITS]) -> J {
    let (abs, neg) = digits[DIGITS - 1];
    let (t, t_id) = select(table, abs, neg);
    let identity = J {
        x: Fe::ONE,
        y: Fe::ONE,
        z: Fe::ZERO,
    };
    let mut q = jadd_affine(&identity, &t, t_id);
    for &(abs, neg) in digits[..DIGITS - 1].iter().rev() {
        for _ in 0..5 {
            q = jdouble(&q);
        }
        let (t, t_id) = select(table, abs, neg);
        q = jadd_affine(&q, &t, t_id);
    }
    q
}

/// `k·Cᵢ` for every point, serialized (SerializeElement: compressed SEC1)
/// after one shared inversion. `k` must be non-zero and the points not the
/// identity (as [`crate::dleq`] guarantees), so no product is the identity
/// in this prime-order group; one that were would refuse the batch.
pub(crate) fn mul_serialize(k: &Scalar, points: &[AffinePoint]) -> Result<Vec<[u8; ELEMENT_LEN]>> {
    let b = Option::<Fe>::from(Fe::from_repr(FieldBytes::from(B_BYTES)))
        .ok_or_else(|| Error::Batch("curve constant".into()))?;
    let digits = recode(k);
    let mut ps = Vec::with_capacity(points.len());
    for p in points {
        let e = p.to_encoded_point(false);
        let (Some(x), Some(y)) = (e.x(), e.y()) else {
            return Err(Error::Batch("identity element".into()));
        };
        let x = Option::<Fe>::from(Fe::from_repr(*x));
        let y = Option::<Fe>::from(Fe::from_repr(*y));
        let (Some(x), Some(y)) = (x, y) else {
            return Err(Error::Encoding("blinded element"));
        };
        ps.push(P { x, y, z: Fe::ONE });
    }
    // Tables for a slice of points at a time, so they stay in cache; each
    // slice costs one more inversion.
    let mut out: Vec<J> = Vec::with_capacity(ps.len());
    for slice in ps.chunks(SLICE) {
        let table = tables(slice, &b)?;
        out.extend(table.chunks(16).map(|t| mul(t, &digits)));
    }
    let zinv = batch_invert(&out.iter().map(|q| q.z).collect::<Vec<_>>())?;
    let mut ser = vec![[0u8; ELEMENT_LEN]; out.len()];
    for ((q, zi), s) in out.iter().zip(zinv).zip(ser.iter_mut()) {
        let zi2 = zi.square();
        let x = q.x * zi2;
        let y = q.y * zi2 * zi;
        s[0] = 0x02 | y.is_odd().unwrap_u8();
        s[1..].copy_from_slice(&x.to_repr());
    }
    Ok(ser)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ProjectivePoint;
    use p256::elliptic_curve::Field;
    use rand_core::OsRng;

    #[test]
    fn recode_recomposes() {
        let mut ks = vec![
            Scalar::ONE,
            -Scalar::ONE,
            Scalar::from(16u64),
            Scalar::from(17u64),
        ];
        ks.extend((0..64).map(|_| Scalar::random(&mut OsRng)));
        for k in ks {
            let mut back = Scalar::ZERO;
            for &(abs, neg) in recode(&k).iter().rev() {
                back *= Scalar::from(32u64);
                let d = Scalar::from(u64::from(abs));
                back += if bool::from(neg) { -d } else { d };
                assert!(abs <= 16);
            }
            assert_eq!(back, k);
        }
    }

    #[test]
    fn matches_p256_multiplication() {
        // Leading zero digits (the identity path), zero digits between
        // others, the top of the range, and random keys.
        let mut ks = vec![
            Scalar::ONE,
            -Scalar::ONE,
            Scalar::from(31u64),
            Scalar::from(32u64),
            Scalar::from(1u64 << 40) + Scalar::from(16u64),
        ];
        ks.extend((0..8).map(|_| Scalar::random(&mut OsRng)));
        // Just below the group order, where the last digit comes close to
        // the exceptional sums that `jadd_affine` leaves unmasked.
        ks.extend((2..=40u64).map(|u| -Scalar::from(u)));
        let points: Vec<AffinePoint> = (0..5)
            .map(|_| (ProjectivePoint::GENERATOR * Scalar::random(&mut OsRng)).to_affine())
            .chain([AffinePoint::GENERATOR])
            .collect();
        for k in ks {
            let got = mul_serialize(&k, &points).unwrap();
            for (p, g) in points.iter().zip(&got) {
                let want = (ProjectivePoint::from(*p) * k)
                    .to_affine()
                    .to_encoded_point(true);
                assert_eq!(want.as_bytes(), g.as_slice());
            }
        }
        assert!(mul_serialize(&Scalar::ZERO, &points).is_err());
    }
}
