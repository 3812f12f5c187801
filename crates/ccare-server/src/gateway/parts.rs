//! A client message's content as the kernel's blocks (GW-3): its text parts, and its
//! `image_url` parts as images, inline (`data:image/…;base64,…`, the base64 checked)
//! or by `http(s)` URL. What is stored is resent upstream on every later request, so
//! an image an upstream would refuse is refused here, before anything is written.

use base64::Engine as _;
use ccare_core::{ContentBlock, Extra, ImageBlock};

use super::wire::{ChatContent, ChatMessage, ContentPart};

/// The `image_url.detail` values OpenAI takes.
const DETAILS: [&str; 3] = ["auto", "low", "high"];

/// The blocks of `message`, the `at`-th of the request's messages: its text as one
/// block, or, when it holds images, its text runs and images in order. `Err` names the
/// message and part and says what is wrong.
pub(crate) fn blocks(message: &ChatMessage, at: usize) -> Result<Vec<ContentBlock>, String> {
    let Some(ChatContent::Parts(parts)) = &message.content else {
        return Ok(vec![ContentBlock::text(message.text())]);
    };
    if !has_images(message) {
        check_kinds(parts, at)?;
        return Ok(vec![ContentBlock::text(message.text())]);
    }
    if !matches!(message.role.as_str(), "user" | "tool") {
        return Err(format!(
            "messages[{at}]: a {:?} message cannot hold images; only user and tool messages can",
            message.role
        ));
    }
    check_kinds(parts, at)?;
    let mut blocks = Vec::new();
    let mut text = String::new();
    for (index, part) in parts.iter().enumerate() {
        if part.kind == "text" {
            text.push_str(part.text.as_deref().unwrap_or_default());
            continue;
        }
        if !text.is_empty() {
            blocks.push(ContentBlock::text(std::mem::take(&mut text)));
        }
        let image = image(part).map_err(|why| format!("messages[{at}].content[{index}]: {why}"))?;
        blocks.push(ContentBlock::Image(image));
    }
    if !text.is_empty() {
        blocks.push(ContentBlock::text(text));
    }
    Ok(blocks)
}

/// Whether any of the message's parts is an image.
pub(crate) fn has_images(message: &ChatMessage) -> bool {
    matches!(&message.content, Some(ChatContent::Parts(parts)) if parts.iter().any(|part| part.kind == "image_url"))
}

/// What the chain hash reads of a message with images (GW-2): every part in order,
/// each with its length, so moving, adding or changing an image or its detail is a
/// different message. `None` for text only: its hash reads the text alone, as before
/// images were taken.
pub(crate) fn hashed_parts(message: &ChatMessage) -> Option<String> {
    let Some(ChatContent::Parts(parts)) = &message.content else {
        return None;
    };
    if !has_images(message) {
        return None;
    }
    let mut hashed = String::new();
    for part in parts {
        match (part.kind.as_str(), &part.image_url) {
            ("image_url", Some(image)) => {
                let detail = image.detail.as_deref().unwrap_or_default();
                hashed.push_str(&format!("\u{0}image:{detail}:{}:", image.url.len()));
                hashed.push_str(&image.url);
            }
            _ => {
                let text = part.text.as_deref().unwrap_or_default();
                hashed.push_str(&format!("\u{0}text:{}:", text.len()));
                hashed.push_str(text);
            }
        }
    }
    Some(hashed)
}

/// Refuses a part that is neither text nor an image.
fn check_kinds(parts: &[ContentPart], at: usize) -> Result<(), String> {
    match parts
        .iter()
        .enumerate()
        .find(|(_, part)| !matches!(part.kind.as_str(), "text" | "image_url"))
    {
        Some((index, part)) => Err(format!(
            "messages[{at}].content[{index}]: a part of type {:?} is not supported; send text and image_url parts",
            part.kind
        )),
        None => Ok(()),
    }
}

/// An `image_url` part as an image block.
fn image(part: &ContentPart) -> Result<ImageBlock, String> {
    let Some(image_url) = part
        .image_url
        .as_ref()
        .filter(|image| !image.url.is_empty())
    else {
        return Err("an image_url part needs image_url.url".to_owned());
    };
    let detail = match image_url.detail.as_deref() {
        None => None,
        Some(detail) if DETAILS.contains(&detail) => Some(detail.to_owned()),
        Some(detail) => {
            return Err(format!(
                "image_url.detail must be \"auto\", \"low\" or \"high\", found {detail:?}"
            ));
        }
    };
    let url = image_url.url.as_str();
    let (media_type, data, uri) = if let Some(rest) = url.strip_prefix("data:") {
        let (media_type, data) = inline(rest)?;
        (media_type, Some(data.to_owned()), None)
    } else if is_web(url) {
        (media_type_of(url).to_owned(), None, Some(url.to_owned()))
    } else {
        return Err("image_url.url must be a data: URL or an http(s) URL".to_owned());
    };
    Ok(ImageBlock {
        media_type,
        data,
        uri,
        offloaded: false,
        detail,
        extra: Extra::new(),
    })
}

/// The media type and base64 data of a data URL's `rest` (after `data:`).
fn inline(rest: &str) -> Result<(String, &str), String> {
    let Some((meta, data)) = rest.split_once(',') else {
        return Err("a data URL needs a comma before its data".to_owned());
    };
    let Some(media_type) = meta.strip_suffix(";base64") else {
        return Err("an image data URL must be base64: data:image/<type>;base64,<data>".to_owned());
    };
    let is_image = media_type
        .split_once('/')
        .is_some_and(|(kind, subtype)| kind.eq_ignore_ascii_case("image") && !subtype.is_empty());
    if !is_image {
        return Err(format!("a data URL of type {media_type:?} is not an image"));
    }
    if data.is_empty() {
        return Err("the image data is empty".to_owned());
    }
    if let Err(error) = base64::engine::general_purpose::STANDARD.decode(data) {
        return Err(format!("the image data is not valid base64: {error}"));
    }
    Ok((media_type.to_owned(), data))
}

/// Whether `url` is an `http` or `https` URL.
fn is_web(url: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
    })
}

/// The media type a web image's path names by its extension; `image/*` when it names
/// none the gateway knows (the upstream fetches it and finds out).
fn media_type_of(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let extension = path
        .rsplit_once('.')
        .map(|(_, extension)| extension.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => "image/*",
    }
}
