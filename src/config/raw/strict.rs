//! Scalars read strictly. Asked for one kind, `config` converts from another (0.5 becomes the
//! integer 1, `true` the integer 1 or the number 1.0, 2.7 the boolean true), which would run
//! callsync with a value nobody wrote. A key takes its own kind, or a string spelling it,
//! because environment variables are strings.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, Visitor};

/// A kind of scalar a key holds.
pub(super) trait Scalar: Sized {
    /// What the key takes, for messages ("expected an integer, got 0.5").
    const EXPECTED: &'static str;

    fn from_integer(_value: i64) -> Option<Self> {
        None
    }

    fn from_float(_value: f64) -> Option<Self> {
        None
    }

    fn from_bool(_value: bool) -> Option<Self> {
        None
    }

    /// The value spelled as text (an environment variable).
    fn parse(text: &str) -> Option<Self>;
}

impl Scalar for i64 {
    const EXPECTED: &'static str = "an integer";

    fn from_integer(value: i64) -> Option<Self> {
        Some(value)
    }

    fn parse(text: &str) -> Option<Self> {
        text.trim().parse().ok()
    }
}

impl Scalar for f64 {
    const EXPECTED: &'static str = "a number";

    fn from_integer(value: i64) -> Option<Self> {
        // Integer keys stay far below 2^53, where every i64 is exactly an f64.
        Some(value as f64)
    }

    fn from_float(value: f64) -> Option<Self> {
        Some(value)
    }

    fn parse(text: &str) -> Option<Self> {
        text.trim().parse().ok()
    }
}

impl Scalar for bool {
    const EXPECTED: &'static str = "true or false";

    fn from_bool(value: bool) -> Option<Self> {
        Some(value)
    }

    fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }
}

/// For an optional scalar key: `#[serde(default, deserialize_with = "strict")]`.
pub(super) fn strict<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Scalar,
{
    deserializer.deserialize_any(Strict(PhantomData)).map(Some)
}

struct Strict<T>(PhantomData<T>);

fn wrong<T: Scalar, E: de::Error>(got: impl fmt::Display) -> E {
    E::custom(format_args!("expected {}, got {got}", T::EXPECTED))
}

impl<'de, T: Scalar> Visitor<'de> for Strict<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTED)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<T, E> {
        T::from_integer(value).ok_or_else(|| wrong::<T, E>(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<T, E> {
        i64::try_from(value)
            .ok()
            .and_then(T::from_integer)
            .ok_or_else(|| wrong::<T, E>(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<T, E> {
        // `{:?}` keeps the fraction: 50.0 prints as "50.0", not "50".
        T::from_float(value).ok_or_else(|| wrong::<T, E>(format_args!("{value:?}")))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<T, E> {
        T::from_bool(value).ok_or_else(|| wrong::<T, E>(value))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        T::parse(text).ok_or_else(|| wrong::<T, E>(format_args!("{text:?}")))
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Err(wrong::<T, E>("nothing"))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<T, A::Error> {
        Err(wrong::<T, A::Error>("a list"))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<T, A::Error> {
        Err(wrong::<T, A::Error>("a table"))
    }
}
