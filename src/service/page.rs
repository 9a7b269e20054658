//! Reading a list page: `BoundedPage` refuses a page at its first row beyond those asked
//! for, before reading it, and, when asked to be lenient, reads each call alone so that a
//! call that does not fit is a [`Misfit`] (`misfit.rs`) rather than the page's failure.

use serde::Deserialize;

use super::models::{CallPage, Extra, Misfit, OutboundCall, Pagination};

impl<'de> Deserialize<'de> for CallPage {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::DeserializeSeed::deserialize(
            BoundedPage {
                max_rows: usize::MAX,
                lenient: false,
            },
            deserializer,
        )
    }
}

/// Reads a [`CallPage`] and fails as soon as its `data` holds a row beyond `max_rows`, before
/// reading that row: a page larger than asked (a service ignoring `page_size`, or an endless
/// body) is refused at row `max_rows + 1`, not once it has been read whole. The error says how
/// many rows were asked for.
#[derive(Debug, Clone, Copy)]
pub struct BoundedPage {
    pub max_rows: usize,
    /// Each call read alone (`misfit.rs`): one that does not fit is a misfit, not the page's
    /// failure. Slower; for a page that failed to read whole.
    pub lenient: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for BoundedPage {
    type Value = CallPage;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<CallPage, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for BoundedPage {
    type Value = CallPage;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a page of calls (an object with `data`)")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<CallPage, A::Error> {
        use serde::de::Error as _;
        let mut data = None;
        let mut pagination = None;
        let mut extra = Extra::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "data" if data.is_some() => return Err(A::Error::duplicate_field("data")),
                "data" => {
                    data = Some(map.next_value_seed(BoundedRows(self.max_rows, self.lenient))?)
                }
                "pagination" if pagination.is_some() => {
                    return Err(A::Error::duplicate_field("pagination"));
                }
                "pagination" => pagination = Some(map.next_value::<Option<Pagination>>()?),
                _ => {
                    extra.insert(key, map.next_value()?);
                }
            }
        }
        let (data, misfits) = data.ok_or_else(|| A::Error::missing_field("data"))?;
        Ok(CallPage {
            data,
            misfits,
            pagination: pagination.flatten(),
            extra,
        })
    }
}

/// The `data` array of a page, at most `.0` rows, each read alone when `.1` (lenient).
struct BoundedRows(usize, bool);

impl<'de> serde::de::DeserializeSeed<'de> for BoundedRows {
    type Value = (Vec<OutboundCall>, Vec<Misfit>);

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for BoundedRows {
    type Value = (Vec<OutboundCall>, Vec<Misfit>);

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array of calls")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let BoundedRows(max_rows, lenient) = self;
        // The service's pages are small; a size hint is only a hint.
        let mut rows = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(max_rows).min(1024));
        let mut misfits = Vec::new();
        while rows.len() + misfits.len() < max_rows {
            let index = rows.len() + misfits.len();
            if lenient {
                match seq.next_element::<Box<serde_json::value::RawValue>>()? {
                    Some(raw) => match super::misfit::read_listed(index, &raw) {
                        Ok(Ok(call)) => rows.push(call),
                        Ok(Err(misfit)) => misfits.push(misfit),
                        Err(unreadable) => return Err(serde::de::Error::custom(unreadable)),
                    },
                    None => return Ok((rows, misfits)),
                }
                continue;
            }
            match seq.next_element()? {
                Some(call) => rows.push(call),
                None => return Ok((rows, misfits)),
            }
        }
        match seq.next_element_seed(RefusedRow(max_rows))? {
            None => Ok((rows, misfits)),
            Some(never) => match never {},
        }
    }
}

/// A row beyond those asked for: refused before a byte of it is read.
struct RefusedRow(usize);

impl<'de> serde::de::DeserializeSeed<'de> for RefusedRow {
    type Value = std::convert::Infallible;

    fn deserialize<D: serde::Deserializer<'de>>(self, _: D) -> Result<Self::Value, D::Error> {
        Err(serde::de::Error::custom(format!(
            "more than the {} rows asked for (page_size)",
            self.0
        )))
    }
}
