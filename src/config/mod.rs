//! Configuration: figment loading (file, then `DELTASHIP_` env), validation, masking.
//! This file only declares the parts and re-exports what the rest of deltaship uses.

mod bounds;
mod content;
mod credentials;
mod destinations;
mod http;
mod input;
mod interpolate;
mod kafka;
mod load;
mod model;
mod names;
mod nats;
mod parse;
mod pointers;
mod problem;
mod redact;
mod resource;
mod resume;
mod route;
mod schema;
mod secret;
mod sink;
mod template;
mod validate;

pub use bounds::{ALL as BOUNDS, Bound};
pub use content::ContentMode;
pub use http::*;
pub use input::ENV_PREFIX;
pub use kafka::*;
pub use load::{ConfigError, load};
pub use model::*;
pub use nats::*;
pub use problem::Problem;
pub use redact::{DigestKeyError, FieldPath, KEY_FIX, RedactAction, RedactField, RedactionConfig, Segment, read_digest_key};
pub use resource::{EventFormat, FilterConfig, PayloadMode, ResourceConfig};
pub use resume::ResumeConfig;
pub use route::{DEFAULT_ROUTE, RouteConfig, selector_matches};
pub use schema::schema;
pub use secret::{Secret, SecretFileError, has_userinfo, mask_secrets_in, mask_urls, mask_value};
pub use sink::SinkConfig;
pub use template::{Piece, Template, TemplateError, check_topic_name};
