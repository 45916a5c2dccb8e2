//! The pages an invited person opens in a browser (§5.2.2): the explainer
//! every invite links to, and the opt-out page with its confirm button.
//! Plain HTML with inline CSS, readable from a phone to a desktop, no
//! script (a form POST records the opt-out), nothing fetched from
//! elsewhere, and nothing of a token or an address echoed into a page.

use axum::http::header;
use axum::response::{Html, IntoResponse, Response};

/// The style every page shares: one column, system fonts, a size a phone
/// can read without zooming.
const STYLE: &str = "body{margin:0;font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;\
font-size:18px;line-height:1.5;color:#1a1a1a;background:#fafafa}\
main{max-width:40rem;margin:0 auto;padding:1.5rem 1.25rem 3rem}\
h1{font-size:1.6rem;line-height:1.25;margin:0.5rem 0 1rem}\
h2{font-size:1.2rem;margin:1.75rem 0 0.5rem}\
p,li{margin:0.5rem 0}form{margin:1.25rem 0}\
button{font:inherit;font-size:1.1rem;padding:0.8rem 1.5rem;border:0;border-radius:0.5rem;\
background:#b3261e;color:#fff;cursor:pointer;min-height:3rem;width:100%;max-width:20rem}\
.note{color:#555;font-size:0.95rem}";

/// A whole page: `title`, then the body's HTML (written here, never taken
/// from a request).
fn page(title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\">\
         <title>{title}</title><style>{STYLE}</style></head>\
         <body><main>{body}</main></body></html>"
    );
    (
        // No script, no frames, nothing from elsewhere; the form posts to
        // the page itself.
        [(
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        )],
        Html(html),
    )
        .into_response()
}

/// The explainer (`GET /v1/about`): what Rendezvous is, what the token in
/// an invite does, and how to opt out.
pub fn explainer() -> Response {
    page(
        "What is this invitation? · Rendezvous",
        "<h1>Someone's assistant sent you an invitation</h1>\
         <p>You got an email from a person's AI assistant, sent on their behalf. \
         The email says who sent it and where they got your address.</p>\
         <h2>What is Rendezvous?</h2>\
         <p>Rendezvous is an open protocol that lets one person's AI assistant find \
         another person's assistant, ask its human for permission, and then talk to it \
         with end-to-end encryption. Nothing reaches you or your assistant without \
         your consent.</p>\
         <h2>What does the token do?</h2>\
         <p>At the bottom of the invitation is a block of text between \
         <code>---BEGIN RDV/1---</code> and <code>---END RDV/1---</code>. It holds a \
         signed, single-use token. If you use an assistant that speaks Rendezvous, it \
         can read the block and answer the invitation; the sender's assistant then asks \
         for your consent the normal way. The token opens nothing by itself: no token, \
         no data, and it cannot be used twice.</p>\
         <p>If you do not use such an assistant, you can ignore the block and simply \
         reply to the person, or do nothing at all.</p>\
         <h2>How do I stop these emails?</h2>\
         <p>Every invitation has an opt-out link and an opt-out address. Open the link \
         and press the button, or send any email to the opt-out address. After that, \
         this gateway never sends probes or invitations to your address again, for \
         anyone.</p>\
         <p class=\"note\">Invitations are sent only when a person asks for one, at most \
         one pending invitation per address, with a 30-day pause after silence or a \
         no.</p>",
    )
}

/// The opt-out page (`GET /v1/optout/{token}`): a confirm button only. A
/// GET records nothing, because mail scanners fetch links.
pub fn optout_form() -> Response {
    page(
        "Opt out · Rendezvous",
        "<h1>Stop Rendezvous probes and invitations</h1>\
         <p>Confirm, and this gateway will never again send probes or invitations to \
         this address, for anyone.</p>\
         <form method=\"post\">\
         <input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
         <button type=\"submit\">Opt out</button></form>\
         <p class=\"note\">Nothing else is asked or stored: only that this address opted \
         out.</p>",
    )
}

/// After the confirm button.
pub fn optout_done() -> Response {
    page(
        "Opted out · Rendezvous",
        "<h1>Done</h1>\
         <p>This address will get no more probes or invitations from this gateway.</p>",
    )
}
