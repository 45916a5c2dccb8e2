//! The JSON bodies of the HTTP API (§4.5, pinned in docs/directory-protocol.md).
//! Binary values are standard padded base64 (§4.6); ids are lowercase hex.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `GET /v1/keys`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KeysResponse {
    /// Always `P256-SHA256`.
    pub suite: String,
    /// Always `voprf`.
    pub mode: String,
    pub keys: Vec<KeyInfo>,
}

/// One listed OPRF key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KeyInfo {
    /// Hex SHA-256 of the serialized public key.
    pub id: String,
    /// SerializeElement(pkS), base64.
    pub public_key: String,
    /// RFC 3339.
    pub not_before: String,
    /// RFC 3339, or null while the key has no successor.
    pub not_after: Option<String>,
}

/// `POST /v1/evaluate`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EvaluateRequest {
    pub key_id: String,
    /// SerializeElement(blindedElement), base64, 1 to `max_batch`.
    pub blinded: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EvaluateResponse {
    pub key_id: String,
    /// SerializeElement(evaluatedElement), base64, in request order.
    pub evaluated: Vec<String>,
    /// One DLEQ proof for the batch: c ‖ s, base64.
    pub proof: String,
}

/// `POST /v1/lookup`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LookupRequest {
    pub key_id: String,
    /// Hex prefixes of `lookup_id`, each exactly `bucket_hex_len` long.
    pub buckets: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LookupResponse {
    pub key_id: String,
    pub buckets: Vec<Bucket>,
}

/// Every listing under one prefix, padded with decoys to a multiple of `pad_to`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    pub prefix: String,
    /// Signed listing documents (and decoys, which match no `lookup_id`).
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub listings: Vec<Value>,
}

/// `PUT` and `DELETE /v1/listings/{lookup_id}` answers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ListingResponse {
    /// `stored`, `replaced` or `removed`.
    pub status: String,
    /// How many agents now claim this `lookup_id` (claims are self-asserted).
    pub claims: u64,
}

/// `GET /v1/info`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct InfoResponse {
    pub suite: String,
    pub mode: String,
    /// Length in hex digits of the bucket prefixes a lookup sends.
    pub bucket_hex_len: u32,
    /// Bucket responses are padded to a multiple of this many entries.
    pub pad_to: u32,
    pub max_batch: u32,
    pub max_buckets: u32,
    pub max_claims_per_lookup_id: u32,
    pub max_listings_per_agent: u32,
    pub listing_max_lifetime_secs: i64,
}

/// Every refusal: a stable machine-readable `error` and a human `message`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: String,
    pub message: String,
}
