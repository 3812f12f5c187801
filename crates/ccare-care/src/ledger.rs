//! The done-ledger (CC-EXT-2): what the model (or the user) recorded as done, pending or
//! blocked, with the log seqs that prove it. It lives in its own storage domain,
//! append-only, is written only by the `ledger` tool (never by a summary), and every
//! checkpoint carries it verbatim, so finished work is not redone after compaction.

use std::sync::Arc;

use ccare_agent::domains::{Domain, DomainError, DomainSpec, PluginDomains, TableSpec};
use ccare_agent::tools::codes;
use ccare_agent::{BoxFuture, Concurrency, Tool, ToolContext, ToolDef, ToolFailure, ToolOutcome};
use ccare_core::{ContentBlock, SessionId};
use ccare_llm::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::care::Care;

/// The ledger's storage domain.
pub const LEDGER_DOMAIN: &str = "context_care_ledger";
/// The tool's name.
pub const LEDGER_TOOL: &str = "ledger";

/// An item's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LedgerStatus {
    /// Finished, with evidence.
    Done,
    /// Still to do.
    Pending,
    /// Waiting on something.
    Blocked,
}

impl LedgerStatus {
    fn as_str(self) -> &'static str {
        match self {
            LedgerStatus::Done => "done",
            LedgerStatus::Pending => "pending",
            LedgerStatus::Blocked => "blocked",
        }
    }
}

/// One ledger entry; the latest entry of an id is its current state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    /// The item's id, chosen by the writer.
    pub id: String,
    /// What the item is.
    pub text: String,
    /// Its status.
    pub status: LedgerStatus,
    /// Log seqs that show it.
    pub evidence_seqs: Vec<u64>,
    /// When it was written (ms since the epoch).
    pub at: i64,
}

/// The ledger store of one mounted plugin.
pub struct Ledger {
    domains: PluginDomains,
    domain: OnceCell<Domain>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Ledger").finish_non_exhaustive()
    }
}

impl Ledger {
    /// A ledger over the plugin's storage domains (opened on first use).
    pub fn new(domains: PluginDomains) -> Self {
        Self {
            domains,
            domain: OnceCell::new(),
        }
    }

    async fn open(&self) -> Result<&Domain, DomainError> {
        self.domain
            .get_or_try_init(|| async {
                self.domains
                    .open(
                        // On demand: a ledger is read at a checkpoint or by its tool,
                        // so the store serves it, and memory keeps no session's.
                        DomainSpec::new(LEDGER_DOMAIN, 1)
                            .table(TableSpec::by_first_segment("entries").on_demand()),
                    )
                    .await
            })
            .await
    }

    /// Every entry of the session, in the order written, read from the store.
    pub async fn entries(&self, session: &SessionId) -> Result<Vec<LedgerEntry>, DomainError> {
        let table = self.open().await?.table("entries")?;
        Ok(table
            .stored_prefix(&entries_of(session))
            .await?
            .into_iter()
            .filter_map(|(_, value)| serde_json::from_value((*value).clone()).ok())
            .collect())
    }

    /// The current state of every item, in order of first appearance.
    pub async fn current(&self, session: &SessionId) -> Result<Vec<LedgerEntry>, DomainError> {
        let mut items: Vec<LedgerEntry> = Vec::new();
        for entry in self.entries(session).await? {
            match items.iter_mut().find(|item| item.id == entry.id) {
                Some(item) => *item = entry,
                None => items.push(entry),
            }
        }
        Ok(items)
    }

    /// Appends an entry and waits until it is durable.
    pub async fn append(
        &self,
        session: &SessionId,
        entry: &LedgerEntry,
    ) -> Result<(), DomainError> {
        let domain = self.open().await?;
        let table = domain.table("entries")?;
        // Counted by key: no entry is built.
        let next = table.stored_keys(&entries_of(session)).await?.len();
        let key = format!("{}/{next:08}", session.as_str());
        table.put(&key, serde_json::to_value(entry).unwrap_or(Value::Null))?;
        let flushed = domain.flush(table.partition(&key).as_deref()).await;
        // Durable (or failed): memory keeps none of it.
        table.evict(&key);
        flushed
    }

    /// How many ledger rows memory holds (none once their writes settled).
    #[cfg(test)]
    fn rows_in_memory(&self) -> usize {
        self.domain
            .get()
            .and_then(|domain| domain.table("entries").ok())
            .map_or(0, |table| table.count(""))
    }
}

/// The key prefix of `session`'s entries.
fn entries_of(session: &SessionId) -> String {
    format!("{}/", session.as_str())
}

/// The ledger as checkpoints carry it; `None` when it is empty.
pub fn render_ledger(items: &[LedgerEntry]) -> Option<String> {
    if items.is_empty() {
        return None;
    }
    let mut lines = vec!["<done-ledger>".to_owned()];
    for item in items {
        let evidence = if item.evidence_seqs.is_empty() {
            String::new()
        } else {
            format!(
                " (evidence: seq {})",
                item.evidence_seqs
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        lines.push(format!(
            "- [{}] {}: {}{evidence}",
            item.status.as_str(),
            item.id,
            item.text
        ));
    }
    lines.push("</done-ledger>".to_owned());
    Some(lines.join("\n"))
}

/// The `ledger` tool.
pub(crate) struct LedgerTool {
    def: ToolDef,
    care: Arc<Care>,
}

impl LedgerTool {
    pub(crate) fn new(care: Arc<Care>) -> Self {
        Self {
            def: ToolDef {
                spec: ToolSpec {
                    name: LEDGER_TOOL.to_owned(),
                    description: crate::texts::ledger_texts(care.locale)
                        .description
                        .into(),
                    input_schema: json!({
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "id": {"type": "string", "minLength": 1, "maxLength": 80},
                            "text": {"type": "string", "minLength": 1, "maxLength": 2000},
                            "status": {"type": "string", "enum": ["done", "pending", "blocked"]},
                            "evidence_seqs": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 50}
                        },
                        "dependentRequired": {"id": ["text", "status"]}
                    }).into(),
                },
                concurrency: Concurrency::Exclusive,
                timeout_ms: None,
                validates_own_arguments: false,
            },
            care,
        }
    }
}

impl Tool for LedgerTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        let care = Arc::clone(&self.care);
        Box::pin(async move {
            let texts = crate::texts::ledger_texts(care.locale);
            let session = context.session.id().clone();
            let internal =
                |error: DomainError| ToolFailure::new(codes::INTERNAL, error.to_string());
            let current = care.ledger.current(&session).await.map_err(internal)?;
            let Some(id) = arguments.get("id").and_then(Value::as_str) else {
                let listing = render_ledger(&current).unwrap_or_else(|| texts.empty.to_owned());
                return Ok(vec![ContentBlock::text(listing)]);
            };
            let text = arguments
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let status: LedgerStatus = arguments
                .get("status")
                .cloned()
                .and_then(|status| serde_json::from_value(status).ok())
                .ok_or_else(|| ToolFailure::new(codes::INVALID_ARGUMENTS, texts.bad_status))?;
            let evidence: Vec<u64> = arguments
                .get("evidence_seqs")
                .and_then(Value::as_array)
                .map(|seqs| seqs.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            let head = context.session.head();
            if let Some(bad) = evidence.iter().find(|seq| **seq >= head) {
                return Err(ToolFailure::new(
                    codes::INVALID_ARGUMENTS,
                    format!("{} {bad} ≥ {head}", texts.bad_evidence),
                ));
            }
            if status == LedgerStatus::Done
                && current
                    .iter()
                    .any(|item| item.id == id && item.status == LedgerStatus::Done)
            {
                // A repeated done gets a reminder, not a refusal (CC-EXT-2).
                return Ok(vec![ContentBlock::text(format!(
                    "{} {id}",
                    texts.already_done
                ))]);
            }
            let entry = LedgerEntry {
                id: id.to_owned(),
                text: text.to_owned(),
                status,
                evidence_seqs: evidence,
                at: context.clock.now_ms(),
            };
            care.ledger
                .append(&session, &entry)
                .await
                .map_err(internal)?;
            Ok(vec![ContentBlock::text(format!("{} {id}", texts.recorded))])
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use ccare_agent::domains::Domains;
    use ccare_core::SessionId;
    use ccare_store::{MemoryStore, Store};

    use super::{Ledger, LedgerEntry, LedgerStatus};

    fn entry(id: &str, status: LedgerStatus) -> LedgerEntry {
        LedgerEntry {
            id: id.to_owned(),
            text: format!("item {id}"),
            status,
            evidence_seqs: vec![3],
            at: 1,
        }
    }

    #[tokio::test]
    async fn a_ledger_is_kept_in_the_store_not_in_memory_and_reads_back_in_order() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let ledger = Ledger::new(Domains::new(Arc::clone(&store)).for_owner("context-care"));
        let (one, two) = (
            SessionId::new("s-one").unwrap(),
            SessionId::new("s-two").unwrap(),
        );
        ledger
            .append(&one, &entry("a", LedgerStatus::Pending))
            .await
            .unwrap();
        ledger
            .append(&two, &entry("x", LedgerStatus::Blocked))
            .await
            .unwrap();
        ledger
            .append(&one, &entry("b", LedgerStatus::Pending))
            .await
            .unwrap();
        ledger
            .append(&one, &entry("a", LedgerStatus::Done))
            .await
            .unwrap();
        assert_eq!(ledger.rows_in_memory(), 0);

        let ids = |entries: Vec<LedgerEntry>| -> Vec<(String, LedgerStatus)> {
            entries
                .into_iter()
                .map(|entry| (entry.id, entry.status))
                .collect()
        };
        assert_eq!(
            ids(ledger.entries(&one).await.unwrap()),
            [
                ("a".to_owned(), LedgerStatus::Pending),
                ("b".to_owned(), LedgerStatus::Pending),
                ("a".to_owned(), LedgerStatus::Done)
            ]
        );
        assert_eq!(
            ids(ledger.current(&one).await.unwrap()),
            [
                ("a".to_owned(), LedgerStatus::Done),
                ("b".to_owned(), LedgerStatus::Pending)
            ]
        );
        // Another process reads the same.
        let reopened = Ledger::new(Domains::new(store).for_owner("context-care"));
        assert_eq!(
            ids(reopened.entries(&two).await.unwrap()),
            [("x".to_owned(), LedgerStatus::Blocked)]
        );
        assert_eq!(reopened.current(&one).await.unwrap().len(), 2);
    }
}
