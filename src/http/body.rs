//! Request bodies (spec decisions 12 and 17): read within the cap only once the request may
//! have one read, otherwise only counted for the 413 rule and discarded; a body that stalls
//! is cut off. Bodies of public endpoints larger than [`SMALL_PUBLIC_BODY`] are read one at
//! a time, so that strangers cannot make the server hold many large bodies at once.

use super::ApiError;
use bytes::{Buf, Bytes};
use futures_util::{Stream, StreamExt};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Public bodies (register, login) up to this size are read without waiting: a login is a
/// few hundred bytes.
pub const SMALL_PUBLIC_BODY: usize = 64 * 1024;
/// How many larger public bodies are held at once; more wait their turn.
pub const LARGE_PUBLIC_BODIES: usize = 1;

/// Large public bodies take turns.
pub struct PublicBodies {
    turns: Arc<Semaphore>,
}

impl Default for PublicBodies {
    fn default() -> PublicBodies {
        PublicBodies {
            turns: Arc::new(Semaphore::new(LARGE_PUBLIC_BODIES)),
        }
    }
}

impl PublicBodies {
    async fn turn(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.turns
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("the server is shutting down"))
    }
}

/// How many account imports run at once in the process (both services together): each
/// holds its body (within the cap) and the import's working memory (docs/backup.md); more
/// wait their turn before their bodies are read, so waiting imports hold no memory.
pub const IMPORTS_AT_ONCE: usize = 1;

static IMPORT_TURNS: Semaphore = Semaphore::const_new(IMPORTS_AT_ONCE);

/// A turn to run an account import, held until the import is done.
pub async fn import_turn() -> Result<tokio::sync::SemaphorePermit<'static>, ApiError> {
    IMPORT_TURNS
        .acquire()
        .await
        .map_err(|_| ApiError::internal("the server is shutting down"))
}

/// The body of an import: JSON, a JSON object (read by the import itself, a piece at a
/// time).
pub fn json_object(request: &super::Request) -> Result<Bytes, ApiError> {
    request.require_json()?;
    if request.body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    Ok(request.body.clone())
}

pub fn too_large(limit: u64) -> ApiError {
    ApiError::payload_too_large(format!("the request body is larger than {limit} bytes"))
}

/// The body of a request, not read yet.
pub struct Incoming<St> {
    stream: St,
    /// The cap: more bytes → 413.
    limit: u64,
    /// Longest wait for the next bytes of the body → 408.
    stall: Duration,
    /// `Content-Length`, when declared (and within the cap).
    declared: Option<u64>,
}

impl<St, B> Incoming<St>
where
    St: Stream<Item = Result<B, warp::Error>> + Unpin,
    B: Buf,
{
    pub fn new(stream: St, limit: u64, stall: Duration, declared: Option<u64>) -> Incoming<St> {
        Incoming {
            stream,
            limit,
            stall,
            declared,
        }
    }

    async fn next_chunk(&mut self) -> Result<Option<B>, ApiError> {
        match tokio::time::timeout(self.stall, self.stream.next()).await {
            Err(_) => Err(ApiError::request_timeout(format!(
                "the request body stalled: no data for {} s",
                self.stall.as_secs_f64()
            ))),
            Ok(None) => Ok(None),
            Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
            Ok(Some(Err(e))) => Err(ApiError::bad_request(format!("could not read the request body: {e}"))),
        }
    }

    /// Reads the body to its end without keeping it: only its length matters (413 above
    /// the cap, answered as soon as the cap is passed).
    pub async fn discard(mut self) -> Result<(), ApiError> {
        if self.declared == Some(0) {
            return Ok(());
        }
        let mut seen = 0u64;
        while let Some(chunk) = self.next_chunk().await? {
            seen += chunk.remaining() as u64;
            if seen > self.limit {
                return Err(too_large(self.limit));
            }
        }
        Ok(())
    }

    /// Reads the body of an authenticated request, within the cap.
    pub async fn read(self) -> Result<Bytes, ApiError> {
        Ok(self.read_with(None).await?.0)
    }

    /// Reads the body of a public endpoint, within the cap: beyond [`SMALL_PUBLIC_BODY`]
    /// only while it holds a turn of `public`, which the caller keeps while it uses the body.
    pub async fn read_public(self, public: &PublicBodies) -> Result<(Bytes, Option<OwnedSemaphorePermit>), ApiError> {
        self.read_with(Some(public)).await
    }

    async fn read_with(
        mut self,
        public: Option<&PublicBodies>,
    ) -> Result<(Bytes, Option<OwnedSemaphorePermit>), ApiError> {
        let mut turn = None;
        let small = SMALL_PUBLIC_BODY as u64;
        if let (Some(public), Some(declared)) = (public, self.declared) {
            if declared > small {
                turn = Some(public.turn().await?);
            }
        }
        // Room for the declared length (within the cap, and for a large public body only
        // with its turn): no copies while the body grows. Pages a client never fills are
        // never touched, so a false claim costs address space, not memory.
        let mut out = Vec::with_capacity(self.declared.unwrap_or(0).min(self.limit) as usize);
        while let Some(mut chunk) = self.next_chunk().await? {
            let total = (out.len() + chunk.remaining()) as u64;
            if total > self.limit {
                return Err(too_large(self.limit));
            }
            if let Some(public) = public {
                if total > small && turn.is_none() {
                    turn = Some(public.turn().await?);
                }
            }
            while chunk.has_remaining() {
                let part = chunk.chunk();
                out.extend_from_slice(part);
                let n = part.len();
                chunk.advance(n);
            }
        }
        Ok((Bytes::from(out), turn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    type Chunk = Result<Bytes, warp::Error>;

    fn chunks(sizes: &[usize]) -> impl Stream<Item = Chunk> + Unpin {
        let v: Vec<Chunk> = sizes.iter().map(|n| Ok(Bytes::from(vec![b'x'; *n]))).collect();
        stream::iter(v)
    }

    fn incoming<St: Stream<Item = Chunk> + Unpin>(s: St, limit: u64, declared: Option<u64>) -> Incoming<St> {
        Incoming::new(s, limit, Duration::from_millis(200), declared)
    }

    #[tokio::test]
    async fn bodies_within_the_cap_are_read_and_longer_ones_are_413() {
        assert_eq!(incoming(chunks(&[3, 4]), 7, None).read().await.unwrap().len(), 7);
        let e = incoming(chunks(&[3, 5]), 7, None).read().await.unwrap_err();
        assert_eq!(e.status(), warp::http::StatusCode::PAYLOAD_TOO_LARGE);
        assert!(incoming(chunks(&[3, 4]), 7, None).discard().await.is_ok());
        let e = incoming(chunks(&[3, 5]), 7, None).discard().await.unwrap_err();
        assert_eq!(e.status(), warp::http::StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test]
    async fn a_stalled_body_is_408() {
        let stalled = chunks(&[3]).chain(stream::pending());
        let e = incoming(Box::pin(stalled), 100, None).read().await.unwrap_err();
        assert_eq!(e.status(), warp::http::StatusCode::REQUEST_TIMEOUT);
        let stalled = chunks(&[3]).chain(stream::pending());
        let e = incoming(Box::pin(stalled), 100, None).discard().await.unwrap_err();
        assert_eq!(e.status(), warp::http::StatusCode::REQUEST_TIMEOUT);
    }

    #[tokio::test]
    async fn large_public_bodies_take_turns_and_small_ones_do_not_wait() {
        let public = PublicBodies::default();
        let big = SMALL_PUBLIC_BODY + 1;
        let (body, turn) = incoming(chunks(&[big]), 1 << 20, None)
            .read_public(&public)
            .await
            .unwrap();
        assert_eq!(body.len(), big);
        assert!(turn.is_some());
        // while the turn is held: a small body is read at once, a large one waits
        let (small, no_turn) = incoming(chunks(&[SMALL_PUBLIC_BODY]), 1 << 20, None)
            .read_public(&public)
            .await
            .unwrap();
        assert_eq!((small.len(), no_turn.is_none()), (SMALL_PUBLIC_BODY, true));
        let waiting = incoming(chunks(&[10]), 1 << 20, Some(big as u64)).read_public(&public);
        let mut waiting = Box::pin(waiting);
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        drop(turn);
        let (body, turn) = waiting.await.unwrap();
        assert_eq!((body.len(), turn.is_some()), (10, true));
    }
}
