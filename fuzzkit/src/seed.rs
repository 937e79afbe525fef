//! Inputs written in the byte format `arbitrary` 1.x reads them from, so that seeds made of
//! known conversations decode to exactly those operations (`examples/seeds.rs`; each target's
//! `encode` is tested to round-trip).
//!
//! The format, as `arbitrary` 1.5 reads it: integers are little-endian and padded with zeros
//! when the data runs out; a `bool` is a byte's low bit; an enum's variant is a `u32`, variant
//! `(x * count) >> 32`; an `Option` a `bool`, then the value; a `Vec` (and the rest of an input
//! taken whole) is a sequence of elements each preceded by a `bool` that is true, ended by a false
//! one or the end of the data.

/// Bytes being written in `arbitrary`'s format.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }
    /// Variant `idx` of an enum of `count` variants.
    pub fn variant(&mut self, idx: u32, count: u32) -> &mut Self {
        let x = ((u64::from(idx) << 32).div_ceil(u64::from(count))) as u32;
        debug_assert_eq!((u64::from(x) * u64::from(count)) >> 32, u64::from(idx));
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }
    /// A `Vec<u8>`.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        for &x in b {
            self.0.extend_from_slice(&[1, x]);
        }
        self.0.push(0);
        self
    }
    /// An `Option<(u16, u16)>`.
    pub fn opt_u16_pair(&mut self, v: Option<(u16, u16)>) -> &mut Self {
        match v {
            None => self.bool(false),
            Some((a, b)) => self.bool(true).u16(a).u16(b),
        }
    }
    /// Another element of a `Vec` follows.
    pub fn more(&mut self) -> &mut Self {
        self.bool(true)
    }
    /// The end of a `Vec`.
    pub fn end(&mut self) -> &mut Self {
        self.bool(false)
    }
}
