//! A stand-in for the service and its OAuth token endpoint on 127.0.0.1:0, for the
//! client's own tests: each route answers from a script, given how many requests it has
//! had and what the request carried.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use url::Url;
use uuid::Uuid;

use crate::config::{ApiConfig, AuthConfig, OAuthConfig, RetryConfig, Secret};

/// The OAuth client secret; characters that form encoding changes, to test redaction.
pub const CLIENT_SECRET: &str = "s3cr3t+value/with&chars";
pub const CALL_UID: Uuid = Uuid::from_u128(0x6f1c_1d9e_3a43_4c0b_9f39_0d3c_5a3f_2b11);

/// A call as the detail endpoint returns it (the least the model requires).
pub fn call_json() -> String {
    format!(
        r#"{{"uid":"{CALL_UID}","status":"pending","created_at":"2026-01-31T09:00:00Z","updated_at":"2026-01-31T09:00:00Z"}}"#
    )
}

/// One scripted answer.
pub struct Reply {
    status: u16,
    body: String,
    delay: Duration,
}

impl Reply {
    pub fn ok(body: impl Into<String>) -> Self {
        Reply::status(200, body)
    }

    pub fn status(status: u16, body: impl Into<String>) -> Self {
        Reply {
            status,
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    /// A token response; `expires_in` is JSON text, or `None` to leave the key out.
    pub fn token(token: &str, expires_in: Option<&str>) -> Self {
        let lifetime = expires_in.map_or(String::new(), |e| format!(r#","expires_in":{e}"#));
        Reply::ok(format!(
            r#"{{"access_token":"{token}","token_type":"Bearer"{lifetime}}}"#
        ))
    }

    /// The same answer, sent only after `delay`.
    pub fn after(self, delay: Duration) -> Self {
        Reply { delay, ..self }
    }
}

/// What a request carried.
#[derive(Debug, Clone)]
pub struct Request {
    /// The bearer token, without `Bearer `.
    pub bearer: Option<String>,
    pub body: String,
}

type Script = Box<dyn Fn(usize, &Request) -> Reply + Send + Sync>;

struct Route {
    script: Script,
    seen: Mutex<Vec<Request>>,
}

struct Shared {
    token: Route,
    api: Route,
}

pub struct FakeService {
    shared: Arc<Shared>,
    pub base_url: Url,
    task: tokio::task::JoinHandle<()>,
}

impl FakeService {
    /// `token` answers `POST /oauth/token`, `api` every `GET` and `POST /api/v1/…`.
    pub async fn start(
        token: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static,
        api: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let route = |script: Script| Route {
            script,
            seen: Mutex::new(Vec::new()),
        };
        let shared = Arc::new(Shared {
            token: route(Box::new(token)),
            api: route(Box::new(api)),
        });
        let app = Router::new()
            .route(
                "/oauth/token",
                post(
                    |State(s): State<Arc<Shared>>, h: HeaderMap, body: String| async move {
                        answer(&s.token, &h, body).await
                    },
                ),
            )
            .route(
                "/api/v1/{*rest}",
                get(|State(s): State<Arc<Shared>>, h: HeaderMap| async move {
                    answer(&s.api, &h, String::new()).await
                })
                .post(
                    |State(s): State<Arc<Shared>>, h: HeaderMap, body: String| async move {
                        answer(&s.api, &h, body).await
                    },
                ),
            )
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeService {
            shared,
            base_url,
            task,
        }
    }

    pub fn token_requests(&self) -> Vec<Request> {
        self.shared.token.seen.lock().unwrap().clone()
    }

    pub fn api_requests(&self) -> Vec<Request> {
        self.shared.api.seen.lock().unwrap().clone()
    }

    pub fn oauth(&self) -> AuthConfig {
        AuthConfig::OAuth(OAuthConfig {
            token_url: self.base_url.join("/oauth/token").unwrap(),
            client_id: "callsync-test".into(),
            client_secret: Secret::new(CLIENT_SECRET),
            scope: None,
        })
    }

    /// A client configuration for this service: quick retries, three attempts.
    pub fn config(&self, auth: AuthConfig) -> ApiConfig {
        ApiConfig {
            base_url: self.base_url.clone(),
            auth: Some(auth.into()),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            requests_per_second: None,
            detail_concurrency: 1,
            max_response_bytes: 32 * 1024 * 1024,
            create_settle: Duration::from_secs(60),
            retry: RetryConfig {
                max_attempts: 3,
                max_elapsed: Duration::from_secs(10),
                initial_interval: Duration::from_millis(1),
                max_interval: Duration::from_millis(5),
                multiplier: 2.0,
            },
        }
    }
}

impl Drop for FakeService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(route: &Route, headers: &HeaderMap, body: String) -> Response {
    let request = Request {
        bearer: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned),
        body,
    };
    let reply = {
        let mut seen = route.seen.lock().unwrap();
        let reply = (route.script)(seen.len(), &request);
        seen.push(request);
        reply
    };
    tokio::time::sleep(reply.delay).await;
    let status = StatusCode::from_u16(reply.status).unwrap();
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        reply.body,
    )
        .into_response()
}
