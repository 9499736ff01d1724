//! The body encoding: little-endian integers, byte strings and lists, each with a
//! `u32` length or count in front, and the two macros that declare every message from
//! its field list: [`messages!`] for a family of messages told apart by a number (the
//! requests, the responses, the enqueued commands, the kernel arguments) and
//! [`wire_struct!`] for a struct encoded field after field.
//!
//! A field's type says how it travels ([`Wire`]): a message's encoder, decoder, kind
//! number and the constant that names it all come from the one declaration, so a new
//! message is one line here and its handling where it is served.

use super::ProtoError;

/// Little-endian reader over a body slice; every read checks the remaining length.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(ProtoError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub fn i32(&mut self) -> Result<i32, ProtoError> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// A `u32` length followed by that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A `u32` item count, checked against the bytes left given each item's minimum size,
    /// so that a hostile count cannot make the caller allocate.
    pub fn count(&mut self, item_len_min: usize) -> Result<usize, ProtoError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(item_len_min.max(1)) > self.buf.len() {
            return Err(ProtoError::Truncated);
        }
        Ok(n)
    }
    /// A counted list ([`Reader::count`] with each item's minimum size), each item read
    /// by `item`.
    pub fn list<T>(
        &mut self,
        item_len_min: usize,
        mut item: impl FnMut(&mut Self) -> Result<T, ProtoError>,
    ) -> Result<Vec<T>, ProtoError> {
        let n = self.count(item_len_min)?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(item(self)?);
        }
        Ok(items)
    }
    /// All the bytes left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), ProtoError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::TrailingBytes(self.buf.len()))
        }
    }
}

pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}
pub fn put_bytes(out: &mut Vec<u8>, v: &[u8]) {
    put_u32(out, u32::try_from(v.len()).expect("byte string fits u32"));
    out.extend_from_slice(v);
}

/// A value with a wire encoding: what a message field can be.
pub trait Wire<'a>: Sized {
    /// The fewest bytes an encoding takes: a list's count is checked against it before
    /// anything is allocated.
    const LEN_MIN: usize;
    fn put(&self, out: &mut Vec<u8>);
    fn read(r: &mut Reader<'a>) -> Result<Self, ProtoError>;
}

macro_rules! wire_int {
    ($($t:ty => $read:ident, $put:ident;)*) => {$(
        impl Wire<'_> for $t {
            const LEN_MIN: usize = std::mem::size_of::<$t>();
            fn put(&self, out: &mut Vec<u8>) {
                $put(out, *self)
            }
            fn read(r: &mut Reader<'_>) -> Result<Self, ProtoError> {
                r.$read()
            }
        }
    )*};
}

wire_int! {
    u8 => u8, put_u8;
    u32 => u32, put_u32;
    i32 => i32, put_i32;
    u64 => u64, put_u64;
}

/// A byte string: `u32` length, then the bytes (borrowed from the body when read).
impl<'a> Wire<'a> for &'a [u8] {
    const LEN_MIN: usize = 4;
    fn put(&self, out: &mut Vec<u8>) {
        put_bytes(out, self)
    }
    fn read(r: &mut Reader<'a>) -> Result<Self, ProtoError> {
        r.bytes()
    }
}

/// A fixed number of items, without a count.
impl<'a, T: Wire<'a> + Copy + Default, const N: usize> Wire<'a> for [T; N] {
    const LEN_MIN: usize = N * T::LEN_MIN;
    fn put(&self, out: &mut Vec<u8>) {
        for item in self {
            item.put(out);
        }
    }
    fn read(r: &mut Reader<'a>) -> Result<Self, ProtoError> {
        let mut items = [T::default(); N];
        for item in &mut items {
            *item = T::read(r)?;
        }
        Ok(items)
    }
}

/// A list: `u32` count, then the items.
impl<'a, T: Wire<'a>> Wire<'a> for Vec<T> {
    const LEN_MIN: usize = 4;
    fn put(&self, out: &mut Vec<u8>) {
        put_u32(out, u32::try_from(self.len()).expect("list fits u32"));
        for item in self {
            item.put(out);
        }
    }
    fn read(r: &mut Reader<'a>) -> Result<Self, ProtoError> {
        r.list(T::LEN_MIN, T::read)
    }
}

/// A pair, one item after the other.
impl<'a, A: Wire<'a>, B: Wire<'a>> Wire<'a> for (A, B) {
    const LEN_MIN: usize = A::LEN_MIN + B::LEN_MIN;
    fn put(&self, out: &mut Vec<u8>) {
        self.0.put(out);
        self.1.put(out);
    }
    fn read(r: &mut Reader<'a>) -> Result<Self, ProtoError> {
        Ok((A::read(r)?, B::read(r)?))
    }
}

/// The encoding of a last field that takes the rest of the body, without a length
/// (`field: &'a [u8] as Rest` in [`messages!`]).
pub(crate) struct Rest;

impl Rest {
    pub fn put(v: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(v);
    }
    pub fn read<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], ProtoError> {
        Ok(r.rest())
    }
}

/// Declares a family of messages told apart by a number: the enum, a module of
/// constants naming the numbers, `kind()`, and the encoding of the fields
/// (`put_fields`, `read_fields`) in the order declared, each by its type's [`Wire`]
/// (or, with `as Codec`, by `Codec::put` and `Codec::read`). Messages that are one
/// value of another type (`Name = NUMBER(n) (Type)`) follow under `wrapping`. The
/// number itself, and what surrounds the fields, is the caller's: a frame header for
/// requests and responses, a tag byte for commands.
macro_rules! messages {
    (
        $(#[$meta:meta])*
        pub enum $name:ident<$lt:lifetime>: $repr:ty, numbers in $numbers:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident = $konst:ident($num:literal)
                    $({ $($field:ident: $ty:ty $(as $codec:ident)?),* $(,)? })?
            ),* $(,)?
        }
        $(wrapping {
            $(
                $(#[$wmeta:meta])*
                $wvariant:ident = $wkonst:ident($wnum:literal) ($wty:ty)
            ),* $(,)?
        })?
    ) => {
        $(#[$meta])*
        pub enum $name<$lt> {
            $(
                $(#[$vmeta])*
                $variant $({ $($field: $ty),* })?,
            )*
            $($(
                $(#[$wmeta])*
                $wvariant($wty),
            )*)?
        }

        /// The number of each message.
        pub mod $numbers {
            $(pub const $konst: $repr = $num;)*
            $($(pub const $wkonst: $repr = $wnum;)*)?
        }

        impl<$lt> $name<$lt> {
            /// The number that tells this message apart.
            pub fn kind(&self) -> $repr {
                match self {
                    $(Self::$variant { .. } => $numbers::$konst,)*
                    $($(Self::$wvariant(..) => $numbers::$wkonst,)*)?
                }
            }

            /// Appends the message's fields (not its number).
            pub fn put_fields(&self, out: &mut Vec<u8>) {
                match self {
                    $(
                        Self::$variant $({ $($field),* })? => {
                            $($($crate::proto::wire::messages!(@put out, $field $(, $codec)?);)*)?
                        }
                    )*
                    $($(Self::$wvariant(inner) => $crate::proto::Wire::put(inner, out),)*)?
                }
            }

            /// Reads the fields of message `kind`; `None` if no message has that number.
            pub fn read_fields(
                kind: $repr,
                r: &mut $crate::proto::Reader<$lt>,
            ) -> Result<Option<Self>, $crate::proto::ProtoError> {
                Ok(Some(match kind {
                    $(
                        $numbers::$konst => Self::$variant $({
                            $($field: $crate::proto::wire::messages!(@read r $(, $codec)?),)*
                        })?,
                    )*
                    $($($numbers::$wkonst => Self::$wvariant($crate::proto::Wire::read(r)?),)*)?
                    _ => return Ok(None),
                }))
            }
        }
    };
    (@put $out:ident, $field:ident) => { $crate::proto::Wire::put($field, $out) };
    (@put $out:ident, $field:ident, $codec:ident) => { $codec::put($field, $out) };
    (@read $r:ident) => { $crate::proto::Wire::read($r)? };
    (@read $r:ident, $codec:ident) => { $codec::read($r)? };
}
pub(crate) use messages;

/// Declares a struct whose encoding is its fields in order, each by its [`Wire`].
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident<$lt:lifetime> {
            $($(#[$fmeta:meta])* pub $field:ident: $ty:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name<$lt> {
            $($(#[$fmeta])* pub $field: $ty),*
        }

        $crate::proto::wire::wire_struct!(@impl [$lt] $name<$lt> { $($field: $ty),* });
    };
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$fmeta:meta])* pub $field:ident: $ty:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty),*
        }

        $crate::proto::wire::wire_struct!(@impl ['w] $name { $($field: $ty),* });
    };
    (@impl [$lt:lifetime] $ty_self:ty { $($field:ident: $ty:ty),* }) => {
        impl<$lt> $crate::proto::Wire<$lt> for $ty_self {
            const LEN_MIN: usize = 0 $(+ <$ty as $crate::proto::Wire<$lt>>::LEN_MIN)*;
            fn put(&self, out: &mut Vec<u8>) {
                $($crate::proto::Wire::put(&self.$field, out);)*
            }
            fn read(
                r: &mut $crate::proto::Reader<$lt>,
            ) -> Result<Self, $crate::proto::ProtoError> {
                Ok(Self {
                    $($field: $crate::proto::Wire::read(r)?,)*
                })
            }
        }
    };
}
pub(crate) use wire_struct;
