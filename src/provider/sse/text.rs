//! The borrowed fast path of the assembler: a chunk that carries only text (the great majority
//! of a stream) is read into these types without building a `serde_json::Value` tree, borrowing
//! its strings from the payload. Anything more than text makes a chunk not plain, and the
//! assembler's general path reads it instead.

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use std::borrow::Cow;

/// A chunk as [`StreamAssembler::event`] reads it first. Each field has the one type the text of
/// a stream gives it; a chunk where any has another, or with a field the general path reads
/// for more than text, is not plain, and [`StreamAssembler::any_event`] reads it.
#[derive(Deserialize)]
pub(super) struct TextChunk<'a> {
    #[serde(borrow, default)]
    pub(super) id: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub(super) model: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub(super) provider: Option<Text<'a>>,
    #[serde(default)]
    pub(super) error: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) code: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) message: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) usage: Option<IgnoredAny>,
    #[serde(borrow, default)]
    pub(super) choices: Option<Vec<Object<TextChoice<'a>>>>,
}

#[derive(Deserialize)]
pub(super) struct TextChoice<'a> {
    #[serde(default)]
    pub(super) index: Option<u64>,
    #[serde(borrow, default)]
    pub(super) finish_reason: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub(super) delta: Option<Object<TextDelta<'a>>>,
}

/// A delta's text, and the fields that make it more than text: tool calls and the turn fields
/// ([`crate::chat::TURN_FIELDS`]).
#[derive(Deserialize)]
pub(super) struct TextDelta<'a> {
    #[serde(borrow, default)]
    pub(super) content: Option<Text<'a>>,
    #[serde(default)]
    pub(super) tool_calls: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) reasoning_details: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) reasoning_content: Option<IgnoredAny>,
}

impl TextChunk<'_> {
    /// No error (nor a bare `code`/`message` without `choices`), no usage, and for the first
    /// choice no in-band error and no delta but text.
    pub(super) fn is_plain(&self) -> bool {
        let plain_choice = |Object(c): &Object<TextChoice<'_>>| {
            c.index.unwrap_or(0) != 0
                || (c.finish_reason.as_ref().is_none_or(|r| r.0 != "error")
                    && c.delta.as_ref().is_none_or(|Object(d)| {
                        d.tool_calls.is_none()
                            && d.reasoning_details.is_none()
                            && d.reasoning_content.is_none()
                    }))
        };
        self.error.is_none()
            && (self.choices.is_some() || (self.code.is_none() && self.message.is_none()))
            && self.usage.is_none()
            && self.choices.iter().flatten().all(plain_choice)
    }
}

/// A `T` read only from a JSON object: serde's derive also reads a struct from an array, field
/// by field, where the general path sees no field at all.
pub(super) struct Object<T>(pub(super) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// A JSON string, borrowed from the chunk unless it has escapes.
#[derive(Clone)]
pub(super) struct Text<'a>(pub(super) Cow<'a, str>);

impl Text<'_> {
    pub(super) fn non_empty(self) -> Option<String> {
        (!self.0.is_empty()).then(|| self.0.into_owned())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Str<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Str<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        deserializer.deserialize_str(Str(std::marker::PhantomData))
    }
}
