//! Response bodies read with a cap (a body beyond it fails without being read whole) and
//! decoded as they arrive: in place when small (invalid UTF-8 in string values, NULs and
//! lone surrogates in strings repaired first, `invalid_utf8.rs`), streamed through the
//! decoder otherwise. A decoding failure
//! says whether the response's framing vouched for the body arriving whole (`framed`), which
//! decides whether it is worth asking again (`ApiError::is_transient`).

use serde::de::DeserializeSeed;

use super::error::ApiError;
use super::invalid_utf8::{Repaired, repair};
use crate::service::Timestamp;

/// A successful response whose body has not been read yet.
pub(super) struct Answer {
    pub(super) content_type: String,
    pub(super) date: Option<Timestamp>,
    pub(super) response: reqwest::Response,
}

/// Whether `response`'s framing tells where its body ends: a `Content-Length`, chunked
/// encoding, or HTTP/2. Then a body read to its end without a transport error arrived
/// whole (hyper fails a body cut short of its framing), and JSON that ends early is the
/// service's, not the network's. Without framing the body ends where the connection
/// closed, which a cut connection does too.
pub(super) fn framed(response: &reqwest::Response) -> bool {
    let headers = response.headers();
    response.version() >= reqwest::Version::HTTP_2
        || headers.contains_key(reqwest::header::CONTENT_LENGTH)
        || headers
            .get_all(reqwest::header::TRANSFER_ENCODING)
            .iter()
            .any(|v| {
                v.to_str()
                    .is_ok_and(|v| v.to_ascii_lowercase().contains("chunked"))
            })
}

/// The body, read whole as it arrives (for error bodies and tokens, which are small).
pub(super) async fn read_capped(
    response: reqwest::Response,
    limit: u64,
    request: &str,
) -> Result<bytes::Bytes, ApiError> {
    let mut chunks = CappedBody::new(response, limit, request)?;
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = chunks.next().await? {
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// A body's chunks as they arrive, refused as soon as they exceed `limit` bytes (or the
/// response announces more): an endless or enormous body fails its request instead of
/// filling memory.
struct CappedBody<'a> {
    response: reqwest::Response,
    limit: u64,
    read: u64,
    request: &'a str,
}

impl<'a> CappedBody<'a> {
    fn new(response: reqwest::Response, limit: u64, request: &'a str) -> Result<Self, ApiError> {
        let body = CappedBody {
            response,
            limit,
            read: 0,
            request,
        };
        if body
            .response
            .content_length()
            .is_some_and(|announced| announced > limit)
        {
            return Err(body.too_large());
        }
        Ok(body)
    }

    async fn next(&mut self) -> Result<Option<bytes::Bytes>, ApiError> {
        let chunk = self.response.chunk().await.map_err(|source| {
            ApiError::transport(self.request, "reading the response body failed", source)
        })?;
        if let Some(chunk) = &chunk {
            self.read += chunk.len() as u64;
            if self.read > self.limit {
                return Err(self.too_large());
            }
        }
        Ok(chunk)
    }

    fn too_large(&self) -> ApiError {
        ApiError::TooLarge {
            request: self.request.to_owned(),
            limit: self.limit,
        }
    }
}

/// Bodies up to this size are read whole and decoded in place: serde_json reads a slice
/// several times faster than a reader, and a page of 100 calls is well under 1 MiB. A body
/// that grows beyond it is decoded as it arrives (`decode_streaming`), so a decoder that
/// refuses it early (a list page at its first row beyond `page_size`) stops the reading
/// there, and no more than this is ever held before decoding starts.
const DECODE_IN_PLACE_BYTES: usize = 4 << 20;

/// Chunks of a body that may wait for the streaming decoder.
const CHUNKS_AHEAD: usize = 8;

/// A seed that may read a body again, more forgivingly, when a value in it did not fit its
/// type: a list page then reads call by call, and a call that does not fit is set aside
/// (`service::Misfit`) rather than failing the page. Only bodies read in place are read
/// again (a page of calls is far smaller than `DECODE_IN_PLACE_BYTES`).
pub(crate) trait Forgiving: Sized {
    fn forgiving(&self) -> Option<Self>;
}

impl<T> Forgiving for std::marker::PhantomData<T> {
    fn forgiving(&self) -> Option<Self> {
        None
    }
}

impl Forgiving for crate::service::BoundedPage {
    fn forgiving(&self) -> Option<Self> {
        (!self.lenient).then_some(crate::service::BoundedPage {
            lenient: true,
            ..*self
        })
    }
}

/// Decodes a successful body with `seed`: in place when it ends within
/// `DECODE_IN_PLACE_BYTES`, as it arrives otherwise.
pub(super) async fn decode<T, S>(
    name: &str,
    answer: Answer,
    limit: u64,
    seed: S,
) -> Result<T, ApiError>
where
    S: for<'de> DeserializeSeed<'de, Value = T> + Forgiving + Send + 'static,
    T: Send + 'static,
{
    let Answer {
        content_type,
        response,
        ..
    } = answer;
    let body_framed = framed(&response);
    let mut body = CappedBody::new(response, limit, name)?;
    let mut buffered = bytes::BytesMut::new();
    while buffered.len() <= DECODE_IN_PLACE_BYTES {
        match body.next().await? {
            Some(chunk) => buffered.extend_from_slice(&chunk),
            None => {
                let decoded = decode_in_place(name, seed, &buffered);
                return decoded_value(name, &content_type, body_framed, Ok(decoded));
            }
        }
    }
    // A body this large is not repaired (`invalid_utf8`): a page of calls is far smaller,
    // and one byte that is not UTF-8, or a lone surrogate, fails it as unreadable.
    let received = buffered.freeze();
    decode_streaming(name, &content_type, body_framed, received, body, seed).await
}

/// Decodes a whole body, its invalid UTF-8, NULs and lone surrogates repaired where
/// harmless; a repair that made it readable is logged once, naming the objects (calls) it
/// touched.
fn decode_in_place<T, S>(name: &str, seed: S, body: &[u8]) -> serde_json::Result<T>
where
    S: for<'de> DeserializeSeed<'de, Value = T> + Forgiving,
{
    let Some(repaired) = repair(body) else {
        return decode_forgiving(seed, body);
    };
    let decoded = decode_forgiving(seed, &repaired.body)?;
    warn_repaired(name, &repaired);
    Ok(decoded)
}

/// `body` decoded with `seed`, or, when a value did not fit its type, with its forgiving
/// form if it has one.
fn decode_forgiving<T, S>(seed: S, body: &[u8]) -> serde_json::Result<T>
where
    S: for<'de> DeserializeSeed<'de, Value = T> + Forgiving,
{
    let again = seed.forgiving();
    match (decode_slice(seed, body), again) {
        // Read again forgivingly; what failed it then is said as first found.
        (Err(error), Some(again)) if error.classify() == serde_json::error::Category::Data => {
            decode_slice(again, body).map_err(|_| error)
        }
        (decoded, _) => decoded,
    }
}

fn warn_repaired(name: &str, repaired: &Repaired) {
    let says = "the service sent text that is not UTF-8, a NUL or half a surrogate pair: stored with U+FFFD in place of each invalid sequence, NUL or lone surrogate; report it to the service's operators";
    let safe = |uid: &str| crate::untrusted::untrusted_text(uid, 64);
    if repaired.uids.is_empty() {
        tracing::warn!(request = name, replaced = repaired.replaced, "{says}");
    }
    for uid in &repaired.uids {
        tracing::warn!(request = name, uid = %safe(uid), replaced = repaired.replaced, "{says}");
    }
}

fn decode_slice<T, S>(seed: S, body: &[u8]) -> serde_json::Result<T>
where
    S: for<'de> DeserializeSeed<'de, Value = T>,
{
    decode_whole(seed, serde_json::Deserializer::from_slice(body))
}

/// One JSON value and nothing after it.
fn decode_whole<'de, R, T, S>(
    seed: S,
    mut json: serde_json::Deserializer<R>,
) -> serde_json::Result<T>
where
    R: serde_json::de::Read<'de>,
    S: DeserializeSeed<'de, Value = T>,
{
    let value = seed.deserialize(&mut json)?;
    json.end()?;
    Ok(value)
}

/// Decodes the rest of a large body as it arrives, `received` first: serde_json reads it on
/// a blocking thread while this task receives it, and whatever the decoder refuses stops
/// the reading.
async fn decode_streaming<T, S>(
    name: &str,
    content_type: &str,
    framed: bool,
    received: bytes::Bytes,
    mut body: CappedBody<'_>,
    seed: S,
) -> Result<T, ApiError>
where
    S: for<'de> DeserializeSeed<'de, Value = T> + Send + 'static,
    T: Send + 'static,
{
    let (chunks, receiver) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
    let mut decoding = tokio::task::spawn_blocking(move || {
        let received = std::io::BufReader::new(ReceivedChunks {
            receiver,
            current: received,
        });
        decode_whole(seed, serde_json::Deserializer::from_reader(received))
    });
    let reading = async move {
        while let Some(chunk) = body.next().await? {
            if chunks.send(chunk).await.is_err() {
                break; // the decoder has stopped: its result says why
            }
        }
        Ok(())
    };
    let read: Result<(), ApiError> = tokio::select! {
        read = reading => read,
        decoded = &mut decoding => return decoded_value(name, content_type, framed, decoded),
    };
    // A transport failure or a body beyond the cap: what the decoder made of the cut-off
    // body does not matter.
    read?;
    decoded_value(name, content_type, framed, decoding.await)
}

fn decoded_value<T>(
    name: &str,
    content_type: &str,
    framed: bool,
    decoded: Result<serde_json::Result<T>, tokio::task::JoinError>,
) -> Result<T, ApiError> {
    let cause = match decoded {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(cause)) => cause,
        Err(join) => match join.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Only a runtime shutting down cancels a blocking task.
            Err(_) => serde_json::Error::io(std::io::Error::other(
                "decoding stopped: the runtime is shutting down",
            )),
        },
    };
    Err(ApiError::Decode {
        request: name.to_owned(),
        content_type: content_type.to_owned(),
        framed,
        cause,
    })
}

/// The chunks a response's task receives, as a blocking reader for serde_json; the end of
/// the channel is the end of the body.
struct ReceivedChunks {
    receiver: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    current: bytes::Bytes,
}

impl std::io::Read for ReceivedChunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.receiver.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}
