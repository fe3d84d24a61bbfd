//! The cluster through the admin client: its id, controller and brokers, as Metadata
//! describes them (Kafka's `describeCluster`). Read-only: nothing here changes the cluster.

use kafka_protocol::messages::MetadataRequest;

use super::{no_routing_codes, Admin, Route};
use crate::error::Result;

const METADATA: (i16, i16) = (1, 12);

/// A broker of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerDescription {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// The cluster as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: Option<String>,
    pub controller: i32,
    pub brokers: Vec<BrokerDescription>,
}

impl Admin {
    /// The cluster's id, controller and brokers.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let build = |_| {
            let mut req = MetadataRequest::default();
            req.topics = Some(Vec::new());
            req
        };
        let resp = self
            .send(
                "describing the cluster",
                Route::Any,
                METADATA,
                build,
                no_routing_codes,
            )
            .await?;
        let mut brokers: Vec<BrokerDescription> = resp
            .brokers
            .iter()
            .map(|b| BrokerDescription {
                id: b.node_id.0,
                host: b.host.to_string(),
                port: b.port,
                rack: b.rack.as_ref().map(|r| r.to_string()),
            })
            .collect();
        brokers.sort_by_key(|b| b.id);
        Ok(ClusterDescription {
            cluster_id: resp.cluster_id.as_ref().map(|c| c.to_string()),
            controller: resp.controller_id.0,
            brokers,
        })
    }
}
