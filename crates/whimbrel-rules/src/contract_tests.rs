//! Tests of `contract` (kept apart so the module stays short).

#[cfg(test)]
mod tests {
    use super::super::*;

    /// The expected outcome of every state × transition pair for a client
    /// request, written out by hand from the contract text (not derived
    /// from the table), so the table is checked against the text.
    fn expected_client(state: ActivityState, t: Transition) -> Result<ActivityState, &'static str> {
        use ActivityState::*;
        use Transition as X;
        match (state, t) {
            (Requested, X::Cancel) => Ok(Cancelled),
            (Ready, X::Cancel) => Ok(Cancelled),
            (Ready, X::Preparing) => Ok(Preparing),
            (Ready, X::Running) => Ok(Running),
            (Queued, X::Cancel) => Ok(Cancelled),
            (Queued, X::Preparing) => Ok(Preparing),
            (Queued, X::Running) => Ok(Running),
            (Queued, X::Failed) => Ok(Failed),
            (Preparing, X::Cancel) => Ok(Cancelled),
            (Preparing, X::Running) => Ok(Running),
            (Preparing, X::Failed) => Ok(Failed),
            (Running, X::Cancel) => Ok(CancelledRunning),
            (Running, X::Failed) => Ok(Failed),
            (Running, X::Completed) => Ok(Completed),
            // Only the live attempt's own report (with its token) ends a
            // cancel; a tokenless client row may not.
            (CancelledRunning, X::Cancel) => Err("forbidden"),
            (CancelledRunning, X::Completed) => Ok(Completed),
            (CancelledRunning, X::Failed) => Ok(Failed),
            // Engine-only or monitor-only rows.
            (Requested, X::Ready | X::Queued) | (Ready, X::Queued) => Err("forbidden"),
            (Queued | Preparing | Running | CancelledRunning, X::TimedOut) => Err("forbidden"),
            (Cancelled | TimedOut | Failed | Completed, _) => Err("terminal"),
            // Valid once the activity gets further.
            (Requested | Ready, X::Running | X::Preparing | X::Failed | X::Completed) => {
                Err("not yet")
            }
            (Queued | Preparing, X::Completed) => Err("not yet"),
            _ => Err("not allowed"),
        }
    }

    #[test]
    fn every_state_transition_pair_for_clients() {
        for s in ALL_STATES {
            for t in ALL_TRANSITIONS {
                let got = next_state(NodeKind::Lambda, s, t, Actor::Client).map_err(|e| match e {
                    TransitionError::Terminal { .. } => "terminal",
                    TransitionError::NotYet { .. } => "not yet",
                    TransitionError::NotAllowed { .. } => "not allowed",
                    TransitionError::Forbidden { .. } => "forbidden",
                    TransitionError::NeverLaunched { .. } => "never launched",
                });
                assert_eq!(got, expected_client(s, t), "{s} x {t}");
            }
        }
    }

    #[test]
    fn reports_for_never_launched_activities_are_refused_at_once() {
        use ActivityState::*;
        for t in [T::Running, T::Preparing, T::Completed, T::Failed] {
            for s in [Requested, Ready] {
                assert!(matches!(
                    next_state_of_report(NodeKind::Lambda, s, false, t, Actor::Client),
                    Err(TransitionError::NeverLaunched { .. })
                ));
            }
        }
        // A user may still cancel an activity that has not been launched.
        assert_eq!(
            next_state_of_report(NodeKind::Lambda, Requested, false, T::Cancel, Actor::Client),
            Ok(Cancelled)
        );
        // Launched: an early COMPLETED is "not yet" (parked).
        assert!(
            next_state_of_report(NodeKind::Lambda, Queued, true, T::Completed, Actor::Client)
                .unwrap_err()
                .is_retryable()
        );
    }

    #[test]
    fn only_the_live_attempt_acknowledges_a_cancel() {
        use ActivityState::*;
        assert!(matches!(
            next_state(NodeKind::Lambda, CancelledRunning, T::Cancel, Actor::Client),
            Err(TransitionError::Forbidden { .. })
        ));
        assert_eq!(
            next_state(
                NodeKind::Lambda,
                CancelledRunning,
                T::Cancel,
                Actor::Attempt
            ),
            Ok(Cancelled)
        );
        // An attempt may do what a client may.
        assert_eq!(
            next_state(NodeKind::Lambda, Running, T::Completed, Actor::Attempt),
            Ok(Completed)
        );
        assert_eq!(
            next_state(NodeKind::Lambda, Running, T::Cancel, Actor::Client),
            Ok(CancelledRunning)
        );
    }

    #[test]
    fn engine_and_monitor_rows() {
        use ActivityState::*;
        assert_eq!(
            next_state(NodeKind::Lambda, Requested, T::Ready, Actor::Engine),
            Ok(Ready)
        );
        assert_eq!(
            next_state(NodeKind::Lambda, Requested, T::Queued, Actor::Engine),
            Ok(Queued)
        );
        assert_eq!(
            next_state(NodeKind::Lambda, Ready, T::Queued, Actor::Engine),
            Ok(Queued)
        );
        assert_eq!(
            next_state(NodeKind::Lambda, Requested, T::Cancel, Actor::Engine),
            Ok(Cancelled)
        );
        assert_eq!(
            next_state(NodeKind::Lambda, Running, T::TimedOut, Actor::Monitor),
            Ok(TimedOut)
        );
        assert_eq!(
            next_state(
                NodeKind::Lambda,
                CancelledRunning,
                T::TimedOut,
                Actor::Monitor
            ),
            Ok(TimedOut)
        );
        assert_eq!(
            next_state(NodeKind::Lambda, Queued, T::TimedOut, Actor::Monitor),
            Ok(TimedOut)
        );
        // Retries: failures of QUEUED, PREPARING, RUNNING may go back to
        // QUEUED; a cancelled activity's may not, nor other transitions.
        for s in [Queued, Preparing, Running] {
            assert_eq!(retry_state(s, T::Failed), Some(Queued));
            assert_eq!(retry_state(s, T::TimedOut), Some(Queued));
        }
        assert_eq!(retry_state(CancelledRunning, T::Failed), None);
        assert_eq!(retry_state(Running, T::Completed), None);
        assert!(matches!(
            next_state(NodeKind::Lambda, Running, T::Completed, Actor::Engine),
            Err(TransitionError::Forbidden { .. })
        ));
        // The engine never cancels a CANCELLED_RUNNING activity: only its
        // own report ends it.
        assert!(matches!(
            next_state(NodeKind::Lambda, CancelledRunning, T::Cancel, Actor::Engine),
            Err(TransitionError::Forbidden { .. })
        ));
    }

    #[test]
    fn terminal_states_are_exactly_the_four() {
        let terminal: Vec<_> = ALL_STATES.into_iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(
            terminal,
            vec![S::Cancelled, S::TimedOut, S::Failed, S::Completed]
        );
    }

    #[test]
    fn only_not_yet_is_retryable() {
        assert!(
            next_state(NodeKind::Lambda, S::Queued, T::Completed, Actor::Client)
                .unwrap_err()
                .is_retryable()
        );
        assert!(
            !next_state(NodeKind::Lambda, S::Completed, T::Completed, Actor::Client)
                .unwrap_err()
                .is_retryable()
        );
        assert!(
            !next_state(NodeKind::Lambda, S::Requested, T::Queued, Actor::Client)
                .unwrap_err()
                .is_retryable()
        );
    }

    #[test]
    fn names_round_trip() {
        for s in ALL_STATES {
            assert_eq!(s.as_str().parse::<ActivityState>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for t in ALL_TRANSITIONS {
            assert_eq!(t.as_str().parse::<Transition>(), Ok(t));
        }
        assert!("HEARTBEAT".parse::<Transition>().is_err());
        assert!("completed".parse::<Transition>().is_err());
    }

    #[test]
    fn workflow_moves() {
        use WorkflowState as W;
        let all = [
            W::Requested,
            W::Running,
            W::Completed,
            W::Failed,
            W::Cancelled,
        ];
        let allowed: Vec<_> = all
            .iter()
            .flat_map(|f| all.iter().map(move |t| (*f, *t)))
            .filter(|(f, t)| f.may_move_to(*t))
            .collect();
        assert_eq!(
            allowed,
            vec![
                (W::Requested, W::Running),
                (W::Requested, W::Failed),
                (W::Requested, W::Cancelled),
                (W::Running, W::Completed),
                (W::Running, W::Failed),
                (W::Running, W::Cancelled),
            ]
        );
    }

    #[test]
    fn workflow_outcomes() {
        let c = |completed, failed, cancelled| EndCounts {
            completed,
            failed,
            cancelled,
        };
        assert_eq!(workflow_outcome(3, c(2, 0, 0)), None);
        assert_eq!(
            workflow_outcome(3, c(3, 0, 0)),
            Some(WorkflowState::Completed)
        );
        assert_eq!(workflow_outcome(3, c(1, 1, 1)), Some(WorkflowState::Failed));
        assert_eq!(
            workflow_outcome(3, c(2, 0, 1)),
            Some(WorkflowState::Cancelled)
        );
        assert_eq!(
            workflow_outcome(0, c(0, 0, 0)),
            Some(WorkflowState::Completed)
        );
    }

    #[test]
    fn a_timer_is_completed_by_the_monitor_only_and_cancelled_at_once() {
        let k = NodeKind::Timer;
        assert_eq!(
            next_state(k, S::Running, T::Completed, Actor::Monitor),
            Ok(S::Completed)
        );
        for actor in [Actor::Client, Actor::Attempt, Actor::Engine] {
            assert!(next_state(k, S::Running, T::Completed, actor).is_err());
        }
        assert_eq!(
            next_state(k, S::Running, T::Cancel, Actor::Client),
            Ok(S::Cancelled)
        );
        // A report of progress for a timer is never launched.
        assert!(matches!(
            next_state_of_report(k, S::Running, false, T::Completed, Actor::Client),
            Err(TransitionError::NeverLaunched { .. })
        ));
        assert!(next_state(k, S::Running, T::TimedOut, Actor::Monitor).is_err());
        assert_eq!(sources(k, T::Running, S::Running), [S::Requested, S::Ready]);
        // The same terminal states as the base table.
        for (_, _, to, _) in TIMER_TRANSITIONS {
            let in_base = TRANSITIONS.iter().any(|(from, ..)| from == to);
            let in_timer = TIMER_TRANSITIONS.iter().any(|(from, ..)| from == to);
            assert_eq!(in_base, in_timer, "{to}");
        }
    }

    #[test]
    fn a_signal_wait_completes_by_the_engine_and_times_out_by_the_monitor() {
        let k = NodeKind::Signal;
        assert_eq!(
            next_state(k, S::Running, T::Completed, Actor::Engine).unwrap(),
            S::Completed
        );
        assert!(next_state(k, S::Running, T::Completed, Actor::Client).is_err());
        assert!(next_state(k, S::Running, T::Completed, Actor::Monitor).is_err());
        assert_eq!(
            next_state(k, S::Running, T::TimedOut, Actor::Monitor).unwrap(),
            S::TimedOut
        );
        assert_eq!(
            next_state(k, S::Running, T::Cancel, Actor::Client).unwrap(),
            S::Cancelled
        );
        assert!(next_state(k, S::Running, T::Failed, Actor::Client).is_err());
        assert_eq!(sources(k, T::Completed, S::Completed), [S::Running]);
    }

    #[test]
    fn a_child_node_ends_only_by_the_engine_or_a_cancel() {
        let k = NodeKind::Child;
        for t in [T::Completed, T::Failed] {
            assert!(next_state(k, S::Running, t, Actor::Engine).is_ok(), "{t:?}");
            assert!(
                next_state(k, S::Running, t, Actor::Client).is_err(),
                "{t:?}"
            );
        }
        assert!(next_state(k, S::Running, T::TimedOut, Actor::Monitor).is_err());
        assert_eq!(
            next_state(k, S::Running, T::Cancel, Actor::Client).unwrap(),
            S::Cancelled
        );
        assert_eq!(sources(k, T::Failed, S::Failed), [S::Running]);
    }
}
