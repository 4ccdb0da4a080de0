//! A conversation's transcript: appends idempotent per run and key, messages kept whole, and the
//! last assistant turn deleted for a regeneration.

use crate::{call, fresh, record, unique};
use freeway::chat::{Message, ToolCall};
use freeway::store::Store;

#[tokio::test]
async fn append_message_is_idempotent_per_run_and_key_and_keeps_order() {
    for db in fresh("append").await {
        let s = &db.store;
        let conv = unique("conv");
        s.append_message(&conv, "run_a", "input", &Message::user("first"))
            .await
            .unwrap();
        s.append_message(
            &conv,
            "run_a",
            "step-1",
            &Message::assistant(Some("answer".into()), vec![]),
        )
        .await
        .unwrap();
        s.append_message(
            &conv,
            "run_a",
            "input",
            &Message::user("first, delivered again"),
        )
        .await
        .unwrap();
        s.append_message(&conv, "run_b", "input", &Message::user("second"))
            .await
            .unwrap();
        s.append_message(
            &conv,
            "run_a",
            "step-1",
            &Message::assistant(Some("again".into()), vec![]),
        )
        .await
        .unwrap();
        let texts: Vec<Option<String>> = s
            .transcript(&conv)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect();
        assert_eq!(
            texts,
            vec![
                Some("first".into()),
                Some("answer".into()),
                Some("second".into())
            ],
            "{}",
            db.label
        );
        assert!(s.transcript("conv_empty").await.unwrap().is_empty());
        db.finish().await;
    }
}

/// Tool calls, their results, and what a provider requires back on the next request (a turn's
/// `reasoning_details`, a call's thought signature) come back exactly as stored.
#[tokio::test]
async fn the_transcript_keeps_tool_calls_and_results_intact() {
    for db in fresh("tools").await {
        let s = &db.store;
        let conv = unique("conv");
        let mut calling = Message::assistant(
            None,
            vec![
                call("call_1"),
                ToolCall {
                    id: "call_2".into(),
                    name: "web".into(),
                    arguments: "not json{".into(),
                    extra_content: Some(
                        serde_json::json!({"google": {"thought_signature": "CtACAdHtim9"}}),
                    ),
                },
            ],
        );
        calling.turn_fields.insert(
            "reasoning_details".into(),
            serde_json::json!([{"type": "reasoning.encrypted", "data": "c2ln", "index": 0}]),
        );
        let messages = vec![
            Message::user("look it up"),
            calling,
            Message::tool_result("call_1", "result one"),
            Message::tool_result("call_2", ""),
            Message::assistant(Some("done — ünïcode ✓ 'quoted' \"double\"".into()), vec![]),
        ];
        for (i, m) in messages.iter().enumerate() {
            s.append_message(&conv, "run_t", &format!("k{i}"), m)
                .await
                .unwrap();
        }
        assert_eq!(s.transcript(&conv).await.unwrap(), messages, "{}", db.label);
        // A NUL (which PostgreSQL refuses in text) is stored as U+FFFD on both backends.
        let nul = Message::tool_result("call_2", "a\0b");
        s.append_message(&conv, "run_t", "nul", &nul).await.unwrap();
        let last = s
            .transcript(&conv)
            .await
            .unwrap()
            .pop()
            .and_then(|m| m.content);
        assert_eq!(last.as_deref(), Some("a\u{FFFD}b"), "{}", db.label);
        db.finish().await;
    }
}

#[tokio::test]
async fn delete_last_assistant_turn_removes_everything_after_the_last_user_message() {
    for db in fresh("regenerate").await {
        let s = &db.store;
        let conv = unique("conv");
        let turn = [
            Message::user("q1"),
            Message::assistant(Some("a1".into()), vec![]),
            Message::user("q2"),
            Message::assistant(None, vec![call("call_9")]),
            Message::tool_result("call_9", "r"),
            Message::assistant(Some("a2".into()), vec![]),
        ];
        for (i, m) in turn.iter().enumerate() {
            s.append_message(&conv, "run_r", &format!("k{i}"), m)
                .await
                .unwrap();
        }
        s.delete_last_assistant_turn(&conv).await.unwrap();
        assert_eq!(
            s.transcript(&conv).await.unwrap(),
            turn[..3].to_vec(),
            "{}",
            db.label
        );
        // Nothing after the last user message: nothing to delete.
        s.delete_last_assistant_turn(&conv).await.unwrap();
        assert_eq!(s.transcript(&conv).await.unwrap().len(), 3, "{}", db.label);
        // The deleted turn's keys stay taken: a late duplicate does not bring it back.
        s.append_message(&conv, "run_r", "k5", &turn[5])
            .await
            .unwrap();
        assert_eq!(s.transcript(&conv).await.unwrap().len(), 3, "{}", db.label);
        s.append_message(
            &conv,
            "run_new",
            "step-1",
            &Message::assistant(Some("a2'".into()), vec![]),
        )
        .await
        .unwrap();
        assert_eq!(
            s.transcript(&conv)
                .await
                .unwrap()
                .last()
                .and_then(|m| m.content.clone())
                .as_deref(),
            Some("a2'")
        );
        db.finish().await;
    }
}

#[tokio::test]
async fn run_and_transcript_reads_what_run_and_transcript_read() {
    for db in fresh("run-and-transcript").await {
        let s = &db.store;
        let conv = unique("conv");
        let nothing = s.run_and_transcript("run_absent", &conv).await.unwrap();
        assert_eq!(nothing, (None, vec![]), "{}", db.label);

        let mut rec = record("run_rt", &conv);
        rec.output = "partial answer".into();
        s.create_run(&rec).await.unwrap();
        let (run, transcript) = s.run_and_transcript("run_rt", &conv).await.unwrap();
        assert_eq!(
            run.as_ref(),
            s.run("run_rt").await.unwrap().as_ref(),
            "{}",
            db.label
        );
        assert!(run.is_some() && transcript.is_empty(), "{}", db.label);

        let turn = [
            Message::user("q1"),
            Message::assistant(None, vec![call("call_1")]),
            Message::tool_result("call_1", "r"),
            Message::assistant(Some("a1".into()), vec![]),
        ];
        for (i, m) in turn.iter().enumerate() {
            s.append_message(&conv, "run_rt", &format!("k{i}"), m)
                .await
                .unwrap();
        }
        let other = unique("conv");
        s.append_message(&other, "run_other", "k0", &Message::user("elsewhere"))
            .await
            .unwrap();
        let (run, transcript) = s.run_and_transcript("run_rt", &conv).await.unwrap();
        assert_eq!(run, s.run("run_rt").await.unwrap(), "{}", db.label);
        assert_eq!(transcript, turn.to_vec(), "{}", db.label);

        s.delete_last_assistant_turn(&conv).await.unwrap();
        let (_, transcript) = s.run_and_transcript("run_rt", &conv).await.unwrap();
        assert_eq!(
            transcript,
            turn[..1].to_vec(),
            "deleted turns are left out: {}",
            db.label
        );
        let (run, transcript) = s.run_and_transcript("run_absent", &conv).await.unwrap();
        assert!(run.is_none() && transcript == turn[..1], "{}", db.label);
        db.finish().await;
    }
}
