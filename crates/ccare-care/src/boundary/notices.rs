//! The latest status notice on a session's surface (CC-NTC-2: a notice is appended
//! only when its text changed; the quiet start: none on the surface yet), found
//! without scanning the whole surface at every boundary.
//!
//! Between two replaces a log's surface only grows (`SessionLog::apply` appends; a
//! replace bumps the replace generation and rebuilds it). So while the generations are
//! the ones of the latest scan and the last message scanned is still in its place
//! (the same message, kept alive here so its address is not reused), only the messages
//! after it are looked at. Anything else (a replace, another log of the session
//! reopened from the store) scans the surface again.

use std::sync::Arc;

use ccare_core::{Message, Source};
use ccare_session::{DerivedMessage, SessionLog};

use super::STATE_SOURCE;

/// What the latest scan of one session's surface found.
#[derive(Debug, Default)]
pub(crate) struct NoticeScan {
    replace_generation: u64,
    content_generation: u64,
    /// How many surface messages were scanned, and the last of them.
    scanned: usize,
    tail: Option<Arc<Message>>,
    /// The position of the latest status notice among them.
    latest: Option<usize>,
}

fn is_notice(derived: &DerivedMessage) -> bool {
    matches!(&derived.message.source,
        Some(Source::Plugin(plugin)) if plugin.kind == STATE_SOURCE)
}

impl NoticeScan {
    /// The latest status notice on `log`'s surface, if any.
    pub(crate) fn latest<'l>(&mut self, log: &'l SessionLog) -> Option<&'l DerivedMessage> {
        let messages = log.derived_messages();
        let tail_in_place = match (self.scanned.checked_sub(1), &self.tail) {
            (None, None) => true,
            (Some(last), Some(tail)) => messages
                .get(last)
                .is_some_and(|derived| Arc::ptr_eq(&derived.message, tail)),
            (None, Some(_)) | (Some(_), None) => false,
        };
        let grown = tail_in_place
            && self.replace_generation == log.replace_generation()
            && self.content_generation == log.content_generation();
        if !grown {
            self.scanned = 0;
            self.latest = None;
        }
        for (index, derived) in messages.iter().enumerate().skip(self.scanned) {
            if is_notice(derived) {
                self.latest = Some(index);
            }
        }
        self.scanned = messages.len();
        self.tail = messages.last().map(|derived| Arc::clone(&derived.message));
        self.replace_generation = log.replace_generation();
        self.content_generation = log.content_generation();
        self.latest.and_then(|index| messages.get(index))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ccare_core::{ContentBlock, EventDraft, PluginSource, SessionId, SurfaceOp};
    use ccare_session::{Registry, SessionLog};

    use super::*;

    fn message(text: &str, notice: bool) -> Message {
        let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
        message.source = Some(if notice {
            Source::Plugin(Box::new(PluginSource {
                kind: STATE_SOURCE.to_owned(),
                plugin: Some("context-care".to_owned()),
                form: Some("notice".to_owned()),
                summary: None,
                sections: None,
                extra: ccare_core::Extra::new(),
            }))
        } else {
            Source::user()
        });
        message
    }

    fn append(log: &mut SessionLog, message: Message) {
        let draft = EventDraft::typed(&ccare_core::kinds::UserMessage { message })
            .unwrap()
            .with_surface(SurfaceOp::Append);
        let event = ccare_core::Event::encode(log.head(), 0, draft).unwrap();
        let candidate = log.prepare(event, &Registry::with_host_defaults()).unwrap();
        log.apply(candidate);
    }

    fn text(derived: Option<&DerivedMessage>) -> Option<String> {
        derived.map(|derived| match &derived.message.content[0] {
            ContentBlock::Text(text) => text.text.clone(),
            _ => String::new(),
        })
    }

    #[test]
    fn cc_ntc_2_the_latest_notice_follows_appends_and_a_reopened_log() {
        let id = SessionId::new("notice-scan").unwrap();
        let mut log = SessionLog::new(id.clone());
        let mut scan = NoticeScan::default();
        assert_eq!(text(scan.latest(&log)), None);
        append(&mut log, message("hello", false));
        assert_eq!(text(scan.latest(&log)), None);
        append(&mut log, message("first notice", true));
        append(&mut log, message("more", false));
        assert_eq!(text(scan.latest(&log)).as_deref(), Some("first notice"));
        append(&mut log, message("second notice", true));
        assert_eq!(text(scan.latest(&log)).as_deref(), Some("second notice"));
        assert_eq!(text(scan.latest(&log)).as_deref(), Some("second notice"));
        // Another log of the session, with no notice: scanned again.
        let mut reopened = SessionLog::new(id);
        for index in 0..5 {
            append(&mut reopened, message(&format!("plain {index}"), false));
        }
        assert_eq!(text(scan.latest(&reopened)), None);
    }
}
