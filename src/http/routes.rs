//! A service's route table: one declarative [`Row`] per route — method, path pattern, name,
//! who may call it, what it does with the body, its handler — from which the matching (404
//! for an unknown path, 405 for a known path and another method), the access check, the body
//! rule ([`super::answer`]) and the listing of the served routes ([`Table::listing`], read by
//! tests/api/openapi.rs) all come.
//!
//! A path pattern is segments after a `/`: literal text, alternatives (`inbox|intray`: the
//! same route under either name) or a capture (`:id`: any one segment, also an empty one).
//! A path is given to the rows whose pattern matches it most literally, segment by segment
//! from the left (`/app/token` before `/app/:name`), whatever their order in the table; then
//! the method picks one of them, or 405.

use super::{path_uuid, ApiError, BodyUse, Reply, Request};
use crate::domain::account::Principal;
use crate::domain::permissions::{Access, Guard, Permission};
use std::future::Future;
use std::pin::Pin;
use uuid::Uuid;
use warp::http::Method;

/// What a handler answers, borrowing the service it runs on.
pub type Answer<'a> = Pin<Box<dyn Future<Output = Result<Reply, ApiError>> + Send + 'a>>;

/// The handler of a row: `handler!(add_item)` for `async fn add_item(&self, call: Call)`.
pub type Handler<S> = for<'a> fn(&'a S, Call) -> Answer<'a>;

/// The [`Handler`] of a method `name` of the service: `handler!(name)`.
macro_rules! handler {
    ($name:ident) => {
        |service, call| Box::pin(service.$name(call))
    };
}
pub(crate) use handler;

/// `Row::get(...)` for `Row::new(Method::GET, ...)`, and so on.
macro_rules! by_method {
    ($($name:ident => $method:ident,)*) => {
        $(
            #[doc = concat!("A `", stringify!($method), "` route (see [`Row::new`]).")]
            pub fn $name(
                path: &'static str,
                name: &'static str,
                guard: impl Into<Guard>,
                body: BodyUse,
                handler: Handler<S>,
            ) -> Row<S> {
                Row::new(Method::$method, path, name, guard, body, handler)
            }
        )*
    };
}

/// One route: `Row::post("/inbox|intray/item", "AddItem", Needs(PermitAdd), Read, handler!(add_item))`.
pub struct Row<S> {
    pub method: Method,
    /// The path pattern (see the module's documentation).
    pub path: &'static str,
    /// The route's name: the metrics' `route` label (`AddItem`, never a path or an id).
    pub name: &'static str,
    /// Who may call it, checked from the headers before any body is read.
    pub access: Access,
    /// The permissions it needs besides the one of `access`: those of what its handler
    /// also reads or writes (an export reads the access keys too); checked with it.
    pub also_needs: &'static [Permission],
    pub body: BodyUse,
    handler: Handler<S>,
}

impl<S> Row<S> {
    /// A route: its method, path pattern, name, who may call it (an [`Access`], or
    /// `access.and(&[...])` for what its handler also reads or writes), what it does with
    /// its body, and its handler.
    pub fn new(
        method: Method,
        path: &'static str,
        name: &'static str,
        guard: impl Into<Guard>,
        body: BodyUse,
        handler: Handler<S>,
    ) -> Row<S> {
        let Guard { access, also_needs } = guard.into();
        Row {
            method,
            path,
            name,
            access,
            also_needs,
            body,
            handler,
        }
    }

    by_method! {
        get => GET,
        post => POST,
        put => PUT,
        delete => DELETE,
    }

    /// Runs the handler on `service`.
    pub fn call<'a>(&self, service: &'a S, call: Call) -> Answer<'a> {
        (self.handler)(service, call)
    }
}

/// The segments a path's captures took, by name.
pub type Captures = Vec<(&'static str, String)>;

/// A request given to a handler: the caller admitted from the headers (`None` on a public
/// route), the request with its body read as the row says, and the path's captures.
pub struct Call {
    pub caller: Option<Principal>,
    pub request: Request,
    captures: Captures,
}

impl Call {
    pub fn new(caller: Option<Principal>, request: Request, captures: Captures) -> Call {
        Call {
            caller,
            request,
            captures,
        }
    }

    /// The caller of a protected route.
    pub fn who(&self) -> Result<&Principal, ApiError> {
        self.caller
            .as_ref()
            .ok_or_else(|| ApiError::internal("a protected route without a caller"))
    }

    /// The segment the pattern's `:name` captured (`None`: the row's pattern has none).
    pub fn capture(&self, name: &str) -> Option<&str> {
        self.captures.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// The capture `:name` as a UUID: 400 unless it is a canonical one.
    pub fn uuid(&self, name: &str) -> Result<Uuid, ApiError> {
        let segment = self
            .capture(name)
            .ok_or_else(|| ApiError::internal(format!("the route captures no {name}")))?;
        path_uuid(segment)
    }
}

/// One segment of a path pattern.
enum Segment {
    /// Any of these texts.
    Literal(Vec<&'static str>),
    /// Any segment, kept under this name.
    Capture(&'static str),
}

fn pattern(path: &'static str) -> Vec<Segment> {
    path.strip_prefix('/')
        .unwrap_or(path)
        .split('/')
        .map(|s| match s.strip_prefix(':') {
            Some(name) => Segment::Capture(name),
            None => Segment::Literal(s.split('|').collect()),
        })
        .collect()
}

/// How literally a pattern matches a path: one flag per segment, literal first; `None` when
/// it does not match.
fn specificity(pattern: &[Segment], segments: &[&str]) -> Option<Vec<bool>> {
    if pattern.len() != segments.len() {
        return None;
    }
    pattern
        .iter()
        .zip(segments)
        .map(|(p, s)| match p {
            Segment::Literal(texts) => texts.contains(s).then_some(true),
            Segment::Capture(_) => Some(false),
        })
        .collect()
}

/// A route as the table serves it, for listings: one per method and spelling of its path
/// (each alternative), captures written `{name}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub method: Method,
    pub path: String,
    pub name: &'static str,
    pub access: Access,
    pub also_needs: &'static [Permission],
    pub body: BodyUse,
}

/// A service's routes.
pub struct Table<S> {
    rows: Vec<(Row<S>, Vec<Segment>)>,
}

impl<S> Table<S> {
    pub fn new(rows: impl IntoIterator<Item = Row<S>>) -> Table<S> {
        Table {
            rows: rows
                .into_iter()
                .map(|row| {
                    let pattern = pattern(row.path);
                    (row, pattern)
                })
                .collect(),
        }
    }

    /// The row for a method and a path's segments (the path without its leading `/`, split
    /// at `/`), with the path's captures; 404 for an unknown path, 405 for a known path and
    /// another method.
    pub fn find(&self, method: &Method, segments: &[&str]) -> Result<(&Row<S>, Captures), ApiError> {
        let matching: Vec<(&Row<S>, &[Segment], Vec<bool>)> = self
            .rows
            .iter()
            .filter_map(|(row, pattern)| specificity(pattern, segments).map(|s| (row, pattern.as_slice(), s)))
            .collect();
        let best = matching
            .iter()
            .map(|(_, _, s)| s)
            .max()
            .ok_or_else(ApiError::unknown_path)?;
        let (row, pattern, _) = matching
            .iter()
            .find(|(row, _, s)| s == best && row.method == method)
            .ok_or_else(ApiError::method_not_allowed)?;
        let captures = pattern
            .iter()
            .zip(segments)
            .filter_map(|(p, s)| match p {
                Segment::Capture(name) => Some((*name, (*s).to_owned())),
                Segment::Literal(_) => None,
            })
            .collect();
        Ok((row, captures))
    }

    /// Every route served, in the table's order.
    pub fn listing(&self) -> Vec<Listed> {
        let mut out = Vec::new();
        for (row, pattern) in &self.rows {
            let mut paths = vec![String::new()];
            for segment in pattern {
                let spellings = match segment {
                    Segment::Literal(texts) => texts.iter().map(|t| t.to_string()).collect(),
                    Segment::Capture(name) => vec![format!("{{{name}}}")],
                };
                paths = paths
                    .iter()
                    .flat_map(|p| spellings.iter().map(move |s| format!("{p}/{s}")))
                    .collect();
            }
            out.extend(paths.into_iter().map(|path| Listed {
                method: row.method.clone(),
                path,
                name: row.name,
                access: row.access,
                also_needs: row.also_needs,
                body: row.body,
            }));
        }
        out
    }
}

#[cfg(test)]
impl<S> Table<S> {
    /// Routes declared twice: the same method on the same path (captures compared by
    /// position), of which only the first would ever be served.
    pub fn served_twice(&self) -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        let mut twice = Vec::new();
        for listed in self.listing() {
            let shape: String = listed
                .path
                .split('/')
                .map(|s| if s.starts_with('{') { "{}" } else { s })
                .collect::<Vec<_>>()
                .join("/");
            if !seen.insert((listed.method.to_string(), shape.clone())) {
                twice.push(format!("{} {shape}", listed.method));
            }
        }
        twice
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::permissions::Permission as P;
    use Access::*;
    use BodyUse::*;

    struct Nothing;

    impl Nothing {
        async fn answer(&self, _call: Call) -> Result<Reply, ApiError> {
            Ok(Reply::empty())
        }
    }

    fn of(rows: Vec<Row<Nothing>>) -> Table<Nothing> {
        Table::new(rows)
    }

    fn table() -> Table<Nothing> {
        of(vec![
            Row::get("/", "Root", Public, Discard, handler!(answer)),
            Row::post(
                "/inbox|intray/item",
                "AddItem",
                Needs(P::PermitAdd),
                Read,
                handler!(answer),
            ),
            Row::get(
                "/inbox|intray/item/:id",
                "GetItem",
                Needs(P::PermitGetItem),
                Discard,
                handler!(answer),
            ),
            Row::delete(
                "/inbox|intray/item/:id",
                "DeleteItem",
                Needs(P::PermitDelete),
                Discard,
                handler!(answer),
            ),
            Row::get("/app/:name", "App", Public, Discard, handler!(answer)),
            Row::post("/app/token", "AppToken", Public, Read, handler!(answer)),
            Row::get(
                "/account/export",
                "Export",
                Needs(P::PermitGetItems).and(&[P::PermitGetAccessKeys]),
                Discard,
                handler!(answer),
            ),
        ])
    }

    fn find(method: Method, path: &str) -> Result<(&'static str, Captures), u16> {
        let segments: Vec<&str> = path.strip_prefix('/').unwrap().split('/').collect();
        let table = table();
        table
            .find(&method, &segments)
            .map(|(row, captures)| (row.name, captures))
            .map_err(|e| e.status().as_u16())
    }

    #[test]
    fn paths_are_matched_most_literally_then_by_method() {
        assert_eq!(find(Method::GET, "/"), Ok(("Root", vec![])));
        assert_eq!(find(Method::POST, "/"), Err(405));
        assert_eq!(find(Method::POST, "/intray/item"), Ok(("AddItem", vec![])));
        assert_eq!(find(Method::POST, "/inbox/item"), Ok(("AddItem", vec![])));
        assert_eq!(find(Method::GET, "/inbox/item"), Err(405));
        assert_eq!(
            find(Method::DELETE, "/intray/item/x"),
            Ok(("DeleteItem", vec![("id", "x".to_owned())]))
        );
        // a capture takes any one segment, also an empty one
        assert_eq!(
            find(Method::GET, "/inbox/item/"),
            Ok(("GetItem", vec![("id", String::new())]))
        );
        assert_eq!(find(Method::GET, "/inbox/item/x/y"), Err(404));
        assert_eq!(find(Method::GET, "/Inbox/item/x"), Err(404));
        assert_eq!(find(Method::GET, "/inbox"), Err(404));
        // the literal path wins over the capture, whatever the order: GET /app/token is 405
        assert_eq!(find(Method::POST, "/app/token"), Ok(("AppToken", vec![])));
        assert_eq!(find(Method::GET, "/app/token"), Err(405));
        assert_eq!(find(Method::GET, "/app/x"), Ok(("App", vec![("name", "x".to_owned())])));
        assert_eq!(find(Method::POST, "/app/x"), Err(405));
    }

    #[test]
    fn the_listing_spells_every_alternative_and_keeps_the_access() {
        let listing = table().listing();
        let routes: Vec<String> = listing.iter().map(|l| format!("{} {}", l.method, l.path)).collect();
        assert_eq!(
            routes,
            [
                "GET /",
                "POST /inbox/item",
                "POST /intray/item",
                "GET /inbox/item/{id}",
                "GET /intray/item/{id}",
                "DELETE /inbox/item/{id}",
                "DELETE /intray/item/{id}",
                "GET /app/{name}",
                "POST /app/token",
                "GET /account/export",
            ]
        );
        let export = listing.last().unwrap();
        assert_eq!(export.access, Needs(P::PermitGetItems));
        assert_eq!(export.also_needs, &[P::PermitGetAccessKeys]);
        assert_eq!(listing[1].body, BodyUse::Read);
        assert_eq!(listing[0].body, BodyUse::Discard);
        assert!(table().served_twice().is_empty());
        let twice = of(vec![
            Row::get("/a/:x", "A", Public, Discard, handler!(answer)),
            Row::get("/b|a/:y", "B", Public, Discard, handler!(answer)),
        ]);
        assert_eq!(twice.served_twice(), ["GET /a/{}"]);
    }

    #[tokio::test]
    async fn a_row_runs_its_handler_with_the_captures() {
        let table = table();
        let (row, captures) = table.find(&Method::GET, &["inbox", "item", "x"]).ok().unwrap();
        let head = crate::http::Head {
            method: Method::GET,
            path: "/inbox/item/x".into(),
            query: String::new(),
            headers: Default::default(),
            peer: None,
            client: None,
        };
        let call = Call::new(
            None,
            Request {
                head,
                body: Default::default(),
            },
            captures,
        );
        assert_eq!(call.capture("id"), Some("x"));
        assert_eq!(call.uuid("id").err().map(|e| e.status().as_u16()), Some(400));
        assert_eq!(call.uuid("other").err().map(|e| e.status().as_u16()), Some(500));
        assert_eq!(call.who().err().map(|e| e.status().as_u16()), Some(500));
        let answer = row.call(&Nothing, call).await.map_err(|e| e.message).unwrap();
        assert_eq!(answer.status, warp::http::StatusCode::OK);
    }
}
