//! A run's steps after the pre-flight: the loop of model calls until the run ends, pauses or
//! snoozes, the tools the model asks for between them (pausing at the first that needs an
//! approval), and the optional summary. Step 1's chain walk is `walk`'s; one call is `attempt`'s.

use super::{Engine, EngineError, Outcome, Run, WhenResting};
use crate::chat::{Approval, Message, Role, ToolCall, text_len};
use crate::events::Event;
use crate::pace::estimate_tokens;
use crate::provider::Completion;
use crate::run::{Code, RunStatus};
use crate::store::Attached;
use crate::tools::ToolContext;

const SUMMARY_PROMPT: &str = "Summarise this conversation in one short sentence.";

impl Engine {
    /// Steps until the run ends, pauses or snoozes.
    pub(super) async fn steps(
        &self,
        run: &mut Run<'_>,
        when_resting: WhenResting,
    ) -> Result<Outcome, EngineError> {
        loop {
            let transcript = self.transcript(run).await?;
            if run.rec.state.route_index.is_some() {
                let pending = pending_tool_calls(&transcript);
                if !pending.is_empty() {
                    if let Some(outcome) = self.run_tools(run, pending).await? {
                        return Ok(outcome);
                    }
                    continue;
                }
            }
            if run.rec.state.counters.steps >= run.budget.max_steps {
                return self
                    .finish(run, RunStatus::Failed, Some(Code::BudgetExhausted))
                    .await;
            }
            let messages = self.messages(run, transcript);
            run.tokens = estimate_tokens(text_len(&messages), run.job.request.max_tokens);
            let step = if run.rec.state.route_index.is_none() {
                self.walk(run, &messages, when_resting).await?
            } else {
                self.later_step(run, &messages, when_resting).await?
            };
            let completion = match step {
                Ok(c) => c,
                Err(stop) => return self.stop(run, stop).await,
            };
            if let Some(outcome) = self.take_completion(run, completion).await? {
                return Ok(outcome);
            }
        }
    }

    /// The messages sent to the model: the job's system prompt, then the transcript.
    fn messages(&self, run: &Run<'_>, transcript: Vec<Message>) -> Vec<Message> {
        let system = run
            .job
            .request
            .system
            .iter()
            .map(|s| Message::system(s.clone()));
        system.chain(transcript).collect()
    }

    /// A step succeeded: store it; finish on a final answer, or announce the tool calls.
    async fn take_completion(
        &self,
        run: &mut Run<'_>,
        c: Completion,
    ) -> Result<Option<Outcome>, EngineError> {
        let state = &mut run.rec.state;
        state.counters.steps += 1;
        if let Some(u) = c.usage {
            run.rec.usage.add(u);
        }
        let text = (!c.text.is_empty()).then(|| c.text.clone());
        let key = format!("step-{}", state.counters.steps);
        let message = Message {
            turn_fields: c.turn_fields.clone(),
            ..Message::assistant(text, c.tool_calls.clone())
        };
        run.unsaved.push(Attached::Message { key, message });
        if c.tool_calls.is_empty() {
            run.rec.output = c.text;
            self.summarise(run).await?;
            return Ok(Some(self.finish(run, RunStatus::Succeeded, None).await?));
        }
        if run.rec.state.counters.steps >= run.budget.max_steps {
            run.rec.output = c.text;
            run.rec.incomplete = true;
            return Ok(Some(
                self.finish(run, RunStatus::Failed, Some(Code::BudgetExhausted))
                    .await?,
            ));
        }
        // Saved before it is announced: an event that cannot be published loses no answer.
        self.save(run).await?;
        for call in &c.tool_calls {
            let event = Event::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            };
            self.publish(run, event).await?;
        }
        Ok(None)
    }

    /// Run the tools the last assistant turn asked for; pause at the first that needs approval.
    async fn run_tools(
        &self,
        run: &mut Run<'_>,
        pending: Vec<ToolCall>,
    ) -> Result<Option<Outcome>, EngineError> {
        let approval_of = |name: &str| {
            run.job
                .request
                .tools
                .iter()
                .find(|t| t.name == name)
                .map(|t| t.approval)
        };
        let (needs_approval, now): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .partition(|c| approval_of(&c.name) == Some(Approval::Required));
        let ctx = ToolContext {
            run_id: &run.rec.run_id,
            user_id: &run.job.request.user_id,
            conversation_id: &run.job.conversation_id,
        };
        let mut results = Vec::new();
        for call in &now {
            let content = match approval_of(&call.name) {
                Some(_) => self.tools.run(&ctx, call).await,
                None => format!("error: there is no tool named {:?}", call.name),
            };
            results.push((call.id.clone(), content));
        }
        // One approval at a time: the others wait for a later turn of the model.
        let mut paused = needs_approval.into_iter();
        let first = paused.next();
        for call in paused {
            results.push((
                call.id.clone(),
                "not executed: another tool call is awaiting approval".to_string(),
            ));
        }
        for (id, content) in &results {
            run.unsaved.push(Attached::Message {
                key: format!("tool-{id}"),
                message: Message::tool_result(id.clone(), content.clone()),
            });
        }
        if let Some(call) = &first {
            run.rec.pending_tool_call = Some(call.clone());
            run.rec.status = RunStatus::AwaitingApproval;
        }
        // The results are stored before they are announced, with whatever else waits for a save
        // (a continuation's input), so a redelivery never runs these tools again.
        self.save(run).await?;
        for (id, content) in results {
            self.publish(run, Event::ToolResult { id, content }).await?;
        }
        let Some(call) = first else {
            return Ok(None);
        };
        self.publish(
            run,
            Event::AwaitingApproval {
                tool_call: call.clone(),
            },
        )
        .await?;
        Ok(Some(Outcome::AwaitingApproval(call)))
    }

    /// `FREEWAY_SUMMARY=on`: one more call on the run's route; its failure does not fail the run.
    async fn summarise(&self, run: &mut Run<'_>) -> Result<(), EngineError> {
        if !run.budget.summary {
            return Ok(());
        }
        let Some(index) = run.rec.state.route_index else {
            return Ok(());
        };
        let transcript = self.transcript(run).await?;
        let mut messages = self.messages(run, transcript);
        messages.push(Message::user(SUMMARY_PROMPT));
        run.tokens = estimate_tokens(text_len(&messages), run.job.request.max_tokens);
        let step = run.rec.state.counters.steps + 1;
        if let Ok(c) = self.attempt(run, index, step, &messages, false).await? {
            run.rec.summary = Some(c.text);
        }
        Ok(())
    }
}

/// The tool calls of the last assistant turn that have no result yet.
fn pending_tool_calls(transcript: &[Message]) -> Vec<ToolCall> {
    let Some(pos) = transcript.iter().rposition(|m| m.role == Role::Assistant) else {
        return vec![];
    };
    let answered: Vec<&str> = transcript[pos + 1..]
        .iter()
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    transcript[pos]
        .tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id.as_str()))
        .cloned()
        .collect()
}
