//! A scripted HTTP service on loopback (slow, throttling or redirecting inbox services, push
//! services, webhooks): answers as its script says and keeps every request.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A request as the scripted inbox received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: warp::http::HeaderMap,
    pub body: String,
    /// The body's bytes as they came.
    pub bytes: Vec<u8>,
}

/// What the scripted inbox does with a request.
pub enum Answer {
    /// Answers with a status, extra headers and a body.
    Reply(u16, Vec<(&'static str, String)>, String),
    /// Never answers (the client gives up after its timeout).
    Hold,
}

/// A login answer with a token.
pub fn login_ok() -> Answer {
    Answer::Reply(
        204,
        vec![("set-cookie", "JWT-Cookie=scripted-token; Path=/; HttpOnly".into())],
        String::new(),
    )
}

/// A successful `POST /inbox/item` answer: a new item's UUID as a JSON string.
pub fn item_added() -> Answer {
    Answer::Reply(
        200,
        vec![("content-type", "application/json".into())],
        format!("\"{}\"", uuid::Uuid::new_v4()),
    )
}

type Script = Arc<dyn Fn(&Seen) -> Answer + Send + Sync>;

/// An HTTP server on 127.0.0.1 that answers as its script says and keeps every request, with
/// the number of requests it is holding (now and at most).
pub struct ScriptedInbox {
    pub ip: String,
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    pub holding: Arc<AtomicUsize>,
    pub most_held: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl ScriptedInbox {
    pub async fn start(script: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> ScriptedInbox {
        ScriptedInbox::start_at("127.0.0.1", script, Default::default()).await
    }

    /// [`ScriptedInbox::start`] on another loopback address (`127.0.0.N`), counting the
    /// requests it holds in `counters` (now, at most), which several may share.
    pub async fn start_at(
        ip: &str,
        script: impl Fn(&Seen) -> Answer + Send + Sync + 'static,
        counters: (Arc<AtomicUsize>, Arc<AtomicUsize>),
    ) -> ScriptedInbox {
        use warp::Filter;
        let listener = TcpListener::bind((ip, 0)).await.expect("bind the scripted inbox");
        let port = listener.local_addr().unwrap().port();
        let script: Script = Arc::new(script);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (holding, most_held) = counters;
        let state = (seen.clone(), holding.clone(), most_held.clone());
        let filter = warp::method()
            .and(warp::path::full())
            .and(warp::header::headers_cloned())
            .and(warp::body::bytes())
            .then(
                move |method: warp::http::Method, path: warp::path::FullPath, headers, body: bytes::Bytes| {
                    let (script, (seen, holding, most_held)) = (script.clone(), state.clone());
                    async move {
                        let request = Seen {
                            method: method.to_string(),
                            path: path.as_str().to_owned(),
                            headers,
                            body: String::from_utf8_lossy(&body).into_owned(),
                            bytes: body.to_vec(),
                        };
                        let answer = script(&request);
                        seen.lock().unwrap().push(request);
                        let (status, headers, body) = match answer {
                            Answer::Reply(status, headers, body) => (status, headers, body),
                            Answer::Hold => {
                                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                                most_held.fetch_max(now, Ordering::SeqCst);
                                // counted while held: the client's time-out drops it
                                let _held = Held(holding.clone());
                                std::future::pending::<()>().await;
                                unreachable!("a held request is never answered")
                            }
                        };
                        let mut response = warp::Reply::into_response(body);
                        *response.status_mut() = warp::http::StatusCode::from_u16(status).unwrap();
                        for (name, value) in headers {
                            response.headers_mut().append(name, value.parse().unwrap());
                        }
                        response
                    }
                },
            );
        let task = tokio::spawn(warp::serve(filter).incoming(listener).run());
        ScriptedInbox {
            ip: ip.to_owned(),
            port,
            seen,
            holding,
            most_held,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}:{}", self.ip, self.port)
    }

    /// The requests received so far with this method and path.
    pub fn requests(&self, method: &str, path: &str) -> Vec<Seen> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.method == method && s.path == path)
            .cloned()
            .collect()
    }

    pub fn all_requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// A held request: `holding` counts it until its connection is dropped.
pub struct Held(Arc<AtomicUsize>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for ScriptedInbox {
    fn drop(&mut self) {
        self.task.abort();
    }
}
