//! Phases 1 and 2 of a step, the step boundary: the next-step entries are claimed (the
//! user's logged at once), the pre-step chain decides which plugin messages enter, and
//! the boundary contributors add their notices (or withdraw entered messages) before
//! anything of the step is logged.

use ccare_core::Message;
use ccare_core::kinds::TurnEndReason;
use serde_json::Value;

use super::{StepResult, Stop, aborted, hook_failed_unentered, log_user};
use crate::agent::Agent;
use crate::hooks::{BoundaryContext, HookContext, Hooks, PreStepDecision, PreStepInput};
use crate::inbox::Entry;

/// What the step boundary entered: the messages to log after `step/start`, and the
/// inbox entries to forget once they are.
pub(super) struct Entered {
    /// The entered messages, notices included, in order.
    pub(super) messages: Vec<Message>,
    /// The inbox ids of the plugin messages the pre-step chain was given.
    pub(super) ids: Vec<u64>,
}

/// Phase 1: claims the next-step entries; the user's are logged at once (and
/// `user_logged` set), the others wait in `plugin_messages` for the pre-step chain.
pub(super) fn claim(
    agent: &Agent,
    plugin_messages: &mut Vec<Entry>,
    user_logged: &mut bool,
) -> StepResult<()> {
    let claimed = agent.inner.state.lock().inbox.take_next_step();
    for entry in claimed {
        if entry.is_user() {
            log_user(agent, entry.message)?;
            agent.forget(&[entry.id]);
            *user_logged = true;
        } else {
            plugin_messages.push(entry);
        }
    }
    Ok(())
}

/// Phase 2: the pre-step chain over `plugin_messages`, then the boundary contributors
/// in priority order. The turn ends here (`Stop::End`) when it is cancelled, a hook
/// fails, the chain rejects the messages (`blocked`), or a first step has nothing to
/// send (`completed`).
pub(super) async fn pre_step(
    agent: &Agent,
    context: &HookContext,
    hooks: &Hooks,
    plugin_messages: &mut Vec<Entry>,
    user_logged: bool,
) -> StepResult<Entered> {
    let token = &context.cancel;
    let input = PreStepInput {
        messages: plugin_messages
            .iter()
            .map(|entry| entry.message.clone())
            .collect(),
    };
    let decision = tokio::select! {
        biased;
        () = token.cancelled() => {
            restore_unentered(agent, std::mem::take(plugin_messages));
            return Err(Stop::End(aborted(agent)));
        }
        decision = hooks.pre_step(context, input) => decision,
    };
    let entered = match decision {
        Err(error) => {
            let unentered = forget_unentered(agent, std::mem::take(plugin_messages));
            return Err(Stop::End(hook_failed_unentered(
                "pre-step", &error, unentered,
            )));
        }
        Ok(PreStepDecision::Reject { by, detail }) => {
            let unentered = forget_unentered(agent, std::mem::take(plugin_messages));
            return Err(Stop::End(TurnEndReason::Blocked {
                by,
                detail,
                unentered,
            }));
        }
        Ok(PreStepDecision::Enter(messages)) => messages,
    };
    // Kept until the step's messages are logged: a cancel that lands before then
    // returns them to the inbox (or drops them) like the ones the chain never saw.
    let given = std::mem::take(plugin_messages);
    let entered_ids: Vec<u64> = given.iter().map(|entry| entry.id).collect();
    if context.step == 1 && entered.is_empty() && !user_logged {
        agent.forget(&entered_ids);
        return Err(Stop::End(TurnEndReason::Completed));
    }
    // Boundary notices follow what the pre-step chain entered, in priority order.
    let mut entered = entered;
    let request_only: Vec<Message> = if hooks.boundary.is_empty() {
        Vec::new()
    } else {
        hooks
            .segments
            .iter()
            .flat_map(|segment| segment.hook.preview(context))
            .collect()
    };
    for (_, contributor) in &hooks.boundary {
        let boundary = BoundaryContext {
            hook: context,
            entered: &entered,
            request_only: &request_only,
        };
        match contributor.hook.contribute(&boundary).await {
            Ok(contribution) => {
                let mut index = 0;
                entered.retain(|_| {
                    let keep = !contribution.withdraw.contains(&index);
                    index += 1;
                    keep
                });
                entered.extend(contribution.notices);
            }
            Err(error) => {
                let unentered = forget_unentered(agent, given);
                return Err(Stop::End(hook_failed_unentered(
                    "boundary",
                    &error.attributed(&contributor.owner),
                    unentered,
                )));
            }
        }
    }
    // A cancel that arrived while the contributors ran (they see the token and end
    // early, e.g. a summary in progress) stops the step here: nothing is logged and
    // no request leaves.
    if token.is_cancelled() {
        restore_unentered(agent, given);
        return Err(Stop::End(aborted(agent)));
    }
    Ok(Entered {
        messages: entered,
        ids: entered_ids,
    })
}

/// Deletes the plugin messages a refused or failed step never entered from the inbox
/// (durably: a restart does not bring them back, and a failing hook does not replay
/// them turn after turn) and returns them as logged in `turn/end`.
fn forget_unentered(agent: &Agent, entries: Vec<Entry>) -> Vec<Value> {
    let ids: Vec<u64> = entries.iter().map(|entry| entry.id).collect();
    agent.forget(&ids);
    entries
        .iter()
        .map(|entry| serde_json::to_value(&entry.message).unwrap_or(Value::Null))
        .collect()
}

/// Puts the plugin messages that never entered back at the front of the inbox, when
/// the cancelled turn keeps its inbox; otherwise deletes them.
pub(super) fn restore_unentered(agent: &Agent, entries: Vec<Entry>) {
    let mut state = agent.inner.state.lock();
    let keep = state
        .active
        .as_ref()
        .is_some_and(|active| active.keep_inbox);
    if keep {
        state.inbox.restore_front(entries);
    } else {
        // Dropped with the cancel (H-CANCEL-3): gone from the durable inbox too, so a
        // restart does not bring them back.
        let ids: Vec<u64> = entries.iter().map(|entry| entry.id).collect();
        agent.forget(&ids);
    }
}
