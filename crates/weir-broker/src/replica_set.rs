//! What a leader knows of its partition's other replicas (Kafka's `Partition` and
//! `Replica` bookkeeping): where each follower's log ends, as its fetches say, and since
//! when it has been caught up; from that, the high watermark (the offset every in-sync
//! replica has) and which followers should join or leave the ISR. Only decisions and
//! numbers: the ISR itself changes in the cluster's metadata (by compare-and-set, see
//! `cluster::propose_isr`), and comes back here when the broker applies it.

use std::collections::HashMap;

use weir_cluster::LeaderAndIsr;

/// Where the partition's state stands in the cluster's metadata: what an ISR change is
/// made over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateStamp {
    pub leadership: LeaderAndIsr,
    /// The state key's mod revision.
    pub mod_revision: i64,
    /// The topic's create revision (this incarnation of it).
    pub topic_create_revision: i64,
    /// The epoch of the controller that wrote it (kept by an ISR change).
    pub controller_epoch: i32,
}

/// One follower as its fetches show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Progress {
    /// Where its log ends (its last fetch offset); -1 until it fetches under this leader.
    leo: i64,
    /// When it last had everything the leader had (ms since the epoch).
    caught_up_ms: i64,
    /// When it last fetched, and the leader's log end then.
    last_fetch_ms: i64,
    leader_leo_at_last_fetch: i64,
}

/// A leader's followers.
#[derive(Debug, Default)]
pub struct ReplicaSet {
    /// This broker.
    me: i32,
    pub replicas: Vec<i32>,
    /// The ISR as the metadata says.
    pub isr: Vec<i32>,
    pub stamp: Option<StateStamp>,
    progress: HashMap<i32, Progress>,
    /// An ISR written to the metadata and not yet seen back.
    pub pending: Option<Vec<i32>>,
    /// Where this leader's epoch starts: a follower joins the ISR only once it has it.
    pub epoch_start: i64,
}

impl ReplicaSet {
    pub fn new(me: i32) -> ReplicaSet {
        ReplicaSet {
            me,
            ..Default::default()
        }
    }

    /// The metadata's view of the partition, as the broker applied it. `became_leader`:
    /// this broker leads it from now (a new epoch): every follower is unknown again, and
    /// those in the ISR count as caught up now (Kafka's `makeLeader`).
    pub fn update(
        &mut self,
        replicas: &[i32],
        stamp: Option<StateStamp>,
        became_leader: Option<(i64, i64)>,
    ) {
        self.replicas = replicas.to_vec();
        self.isr = stamp
            .as_ref()
            .map(|s| s.leadership.isr.clone())
            .unwrap_or_default();
        if stamp.as_ref().map(|s| s.mod_revision) != self.stamp.as_ref().map(|s| s.mod_revision) {
            self.pending = None;
        }
        self.stamp = stamp;
        if let Some((now_ms, log_end)) = became_leader {
            self.epoch_start = log_end;
            self.progress.clear();
            for r in replicas.iter().filter(|r| **r != self.me) {
                let in_isr = self.isr.contains(r);
                self.progress.insert(
                    *r,
                    Progress {
                        leo: -1,
                        caught_up_ms: if in_isr { now_ms } else { 0 },
                        last_fetch_ms: 0,
                        leader_leo_at_last_fetch: -1,
                    },
                );
            }
        }
        self.progress.retain(|r, _| replicas.contains(r));
    }

    /// A fetch from follower `id` at `fetch_offset`, while the leader's log ends at
    /// `leader_leo` (Kafka's `updateFetchState`).
    pub fn on_fetch(&mut self, id: i32, fetch_offset: i64, leader_leo: i64, now_ms: i64) {
        let p = self.progress.entry(id).or_insert(Progress {
            leo: -1,
            caught_up_ms: 0,
            last_fetch_ms: 0,
            leader_leo_at_last_fetch: -1,
        });
        if fetch_offset >= leader_leo {
            p.caught_up_ms = now_ms;
        } else if fetch_offset >= p.leader_leo_at_last_fetch && p.leader_leo_at_last_fetch >= 0 {
            p.caught_up_ms = p.caught_up_ms.max(p.last_fetch_ms);
        }
        p.leo = fetch_offset;
        p.last_fetch_ms = now_ms;
        p.leader_leo_at_last_fetch = leader_leo;
    }

    /// The high watermark the ISR makes: the least log end of its members (this broker's
    /// is `leader_leo`). `None` while a member's is unknown (it has not fetched from this
    /// leader yet). The members are those of the ISR and of a change not yet seen back
    /// (Kafka's "maximal ISR", KIP-497): a follower being added may already be in the
    /// ISR the controller elects from, so the high watermark must not pass it.
    pub fn high_watermark(&self, leader_leo: i64) -> Option<i64> {
        let mut hw = leader_leo;
        let pending = self.pending.iter().flatten();
        for r in self.isr.iter().chain(pending).filter(|r| **r != self.me) {
            let leo = self.progress.get(r).map_or(-1, |p| p.leo);
            if leo < 0 {
                return None;
            }
            hw = hw.min(leo);
        }
        Some(hw)
    }

    /// A follower to add to the ISR: not in it, its log past the high watermark and this
    /// leader's epoch start. The ISR it would make, unless a change is pending.
    pub fn to_expand(&self, id: i32, hw: i64) -> Option<Vec<i32>> {
        if self.pending.is_some() || self.isr.contains(&id) || !self.replicas.contains(&id) {
            return None;
        }
        let p = self.progress.get(&id)?;
        if p.leo < hw || p.leo < self.epoch_start {
            return None;
        }
        let mut isr = self.isr.clone();
        isr.push(id);
        // In the replicas' order, as Kafka lists them.
        isr.sort_by_key(|b| self.replicas.iter().position(|r| r == b));
        Some(isr)
    }

    /// Followers behind for longer than `lag_ms` leave the ISR (Kafka's
    /// `getOutOfSyncReplicas`): the ISR without them, unless a change is pending or none
    /// lag. The leader always stays.
    pub fn to_shrink(&self, leader_leo: i64, now_ms: i64, lag_ms: i64) -> Option<Vec<i32>> {
        if self.pending.is_some() {
            return None;
        }
        let lagging = |r: &i32| {
            *r != self.me
                && self
                    .progress
                    .get(r)
                    .is_none_or(|p| p.leo != leader_leo && now_ms - p.caught_up_ms > lag_ms)
        };
        if !self.isr.iter().any(lagging) {
            return None;
        }
        Some(self.isr.iter().copied().filter(|r| !lagging(r)).collect())
    }

    /// Whether `id` is a replica this leader tracks.
    pub fn is_follower(&self, id: i32) -> bool {
        id != self.me && self.replicas.contains(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(isr: Vec<i32>, rev: i64) -> Option<StateStamp> {
        Some(StateStamp {
            leadership: LeaderAndIsr::initial(1, isr),
            mod_revision: rev,
            topic_create_revision: 1,
            controller_epoch: 1,
        })
    }

    #[test]
    fn the_high_watermark_waits_for_every_in_sync_follower() {
        let mut s = ReplicaSet::new(1);
        s.update(&[1, 2, 3], stamp(vec![1, 2, 3], 5), Some((1000, 10)));
        assert_eq!(
            s.high_watermark(20),
            None,
            "followers unknown under this leader"
        );
        s.on_fetch(2, 15, 20, 1001);
        s.on_fetch(3, 12, 20, 1001);
        assert_eq!(s.high_watermark(20), Some(12));
        s.update(&[1, 2, 3], stamp(vec![1, 2], 6), None);
        assert_eq!(s.high_watermark(20), Some(15), "3 left the ISR");
        // Back: once it has the high watermark and this epoch's start.
        assert_eq!(s.to_expand(3, 15), None);
        s.on_fetch(3, 16, 20, 1002);
        assert_eq!(s.to_expand(3, 15), Some(vec![1, 2, 3]));
        s.pending = Some(vec![1, 2, 3]);
        assert_eq!(s.to_expand(3, 15), None, "one change at a time");
        // While 3's joining is not seen back, the high watermark waits for it too: the
        // controller may already elect from an ISR that holds it.
        assert_eq!(s.high_watermark(20), Some(15));
        s.on_fetch(2, 20, 20, 1003);
        assert_eq!(s.high_watermark(20), Some(16), "not past 3's log end");
        s.update(&[1, 2, 3], stamp(vec![1, 2, 3], 7), None);
        assert_eq!(s.pending, None, "seen back");
    }

    #[test]
    fn a_follower_lagging_longer_than_the_lag_time_leaves_the_isr() {
        let mut s = ReplicaSet::new(1);
        s.update(&[1, 2, 3], stamp(vec![1, 2, 3], 5), Some((0, 0)));
        s.on_fetch(2, 100, 100, 1_000);
        s.on_fetch(3, 50, 100, 1_000);
        assert_eq!(s.to_shrink(100, 20_000, 30_000), None);
        // 2 keeps up; 3 fetches but never catches up.
        s.on_fetch(2, 200, 200, 31_000);
        s.on_fetch(3, 60, 200, 31_000);
        assert_eq!(s.to_shrink(200, 31_000, 30_000), Some(vec![1, 2]));
        // Fetching up to what the leader had at its previous fetch counts as caught up then.
        s.on_fetch(3, 200, 250, 32_000);
        assert_eq!(s.to_shrink(250, 32_000, 30_000), None);
    }
}
