//! The states of a transactional id (Kafka's `TransactionState`), with the id each is
//! persisted as and the transitions Kafka's coordinator allows between them.

/// Where a transactional id's current transaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction open (after InitProducerId).
    Empty,
    /// Partitions or offsets have been added.
    Ongoing,
    /// EndTxn(commit) is durable; markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fence is durable; markers are being written.
    PrepareAbort,
    /// Every COMMIT marker is written.
    CompleteCommit,
    /// Every ABORT marker is written.
    CompleteAbort,
    /// Expired: the id's record is about to be removed (never written as a state).
    Dead,
    /// A fence in memory, before it is written as PrepareAbort at the next epoch.
    PrepareEpochFence,
}

impl TxnState {
    /// The `TransactionStatus` byte of `__transaction_state`.
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's names, as DescribeTransactions and ListTransactions report them.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The states a transition to this one may start from (Kafka's `validPreviousStates`).
    pub fn valid_previous_states(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Empty, Ongoing, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether the coordinator may move a transactional id from `self` to `to`.
    pub fn can_transition_to(self, to: TxnState) -> bool {
        to.valid_previous_states().contains(&self)
    }

    /// Whether a transaction of this state has its outcome decided but not yet written to
    /// every partition (the coordinator finishes it after a restart).
    pub fn is_preparing(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }

    /// Whether no transaction is open (InitProducerId may bump the epoch at once).
    pub fn is_idle(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

#[cfg(test)]
mod tests {
    use super::TxnState::{self, *};

    const ALL: [TxnState; 8] = [
        Empty,
        Ongoing,
        PrepareCommit,
        PrepareAbort,
        CompleteCommit,
        CompleteAbort,
        Dead,
        PrepareEpochFence,
    ];

    #[test]
    fn ids_round_trip_and_unknown_ids_are_refused() {
        for s in ALL {
            assert_eq!(TxnState::from_id(s.id()), Some(s));
        }
        assert_eq!(TxnState::from_id(8), None);
        assert_eq!(TxnState::from_id(-1), None);
    }

    #[test]
    fn transitions_are_kafkas() {
        let allowed: Vec<(TxnState, TxnState)> = ALL
            .iter()
            .flat_map(|&a| ALL.iter().map(move |&b| (a, b)))
            .filter(|(a, b)| a.can_transition_to(*b))
            .collect();
        // A commit goes Ongoing -> PrepareCommit -> CompleteCommit, never backwards.
        assert!(Ongoing.can_transition_to(PrepareCommit));
        assert!(PrepareCommit.can_transition_to(CompleteCommit));
        assert!(!PrepareCommit.can_transition_to(PrepareAbort));
        assert!(!CompleteCommit.can_transition_to(PrepareCommit));
        // A fence aborts at the next epoch; nothing else leaves a fence.
        assert!(Ongoing.can_transition_to(PrepareEpochFence));
        assert!(PrepareEpochFence.can_transition_to(PrepareAbort));
        assert!(!PrepareEpochFence.can_transition_to(CompleteAbort));
        // Kafka's table, whole: sixteen transitions.
        assert_eq!(
            allowed,
            vec![
                (Empty, Empty),
                (Empty, Ongoing),
                (Empty, Dead),
                (Ongoing, Ongoing),
                (Ongoing, PrepareCommit),
                (Ongoing, PrepareAbort),
                (Ongoing, PrepareEpochFence),
                (PrepareCommit, CompleteCommit),
                (PrepareAbort, CompleteAbort),
                (CompleteCommit, Empty),
                (CompleteCommit, Ongoing),
                (CompleteCommit, Dead),
                (CompleteAbort, Empty),
                (CompleteAbort, Ongoing),
                (CompleteAbort, Dead),
                (PrepareEpochFence, PrepareAbort),
            ]
        );
        assert!(ALL.iter().all(|s| !Dead.can_transition_to(*s)));
    }
}
