use super::Ack;
use slab::Slab;
use tracing::{info, trace, warn};

use crate::protocol::{
    matches, ConnAck, ConnAckProperties, PingResp, PubAck, PubComp, PubRec, PubRel, Publish,
    PublishProperties, SubAck, UnsubAck,
};
use crate::router::{DataRequest, FilterIdx, SubscriptionMeter, Waiters};
use crate::{ConnectionId, Filter, Offset, RouterConfig, Topic};

use crate::segments::{CommitLog, Position};
use crate::Storage;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::time::Instant;

type PubWithProp = (Publish, Option<PublishProperties>);

/// rdv patch: most topics whose matching filters `publish_filters` caches.
/// Upstream cached every topic ever published to a filter, for the process's
/// life; past this the cache starts over (misses recompute from the filters).
pub const PUBLISH_FILTERS_CAP: usize = 16_384;

/// rdv patch: true if `filter` has no wildcard, so it matches one topic only.
fn exact(filter: &str) -> bool {
    !filter.contains(['+', '#'])
}

#[derive(Clone)]
pub struct PublishData {
    pub publish: Publish,
    pub properties: Option<PublishProperties>,
    pub timestamp: Instant,
}

impl From<PubWithProp> for PublishData {
    fn from((publish, properties): PubWithProp) -> Self {
        PublishData {
            publish,
            properties,
            timestamp: Instant::now(),
        }
    }
}

// TODO: remove this from here
impl Storage for PublishData {
    // TODO: calculate size of publish properties as well!
    fn size(&self) -> usize {
        let publish = &self.publish;
        4 + publish.topic.len() + publish.payload.len()
    }
}

/// Stores 'device' data and 'actions' data in native commitlog
/// organized by subscription filter. Device data is replicated
/// while actions data is not
pub struct DataLog {
    pub config: RouterConfig,
    /// Native commitlog data organized by subscription. Contains
    /// device data and actions data logs.
    ///
    /// Device data is replicated while actions data is not.
    /// Also has waiters used to wake connections/replicator tracker
    /// which are caught up with all the data on 'Filter' and waiting
    /// for new data
    pub native: Slab<Data<PublishData>>,
    /// Map of subscription filter name to filter index
    filter_indexes: HashMap<Filter, FilterIdx>,
    retained_publishes: HashMap<Topic, PublishData>,
    /// List of filters associated with a topic
    publish_filters: HashMap<Topic, Vec<FilterIdx>>,
    /// rdv patch: bytes of publications in all filter logs.
    log_bytes: u64,
    /// rdv patch: bytes of retained publications (`PublishData::size`).
    retained_bytes: u64,
    /// rdv patch: retained publications not kept for `max_retained_bytes`.
    retained_refused: u64,
    /// rdv patch: publications readers skipped for falling behind the log.
    pub(crate) lagged: u64,
}

impl DataLog {
    pub fn new(config: RouterConfig) -> io::Result<DataLog> {
        let mut native = Slab::new();
        let mut filter_indexes = HashMap::new();
        let retained_publishes = HashMap::new();
        let publish_filters = HashMap::new();

        if let Some(warmup_filters) = config.initialized_filters.clone() {
            for filter in warmup_filters {
                let data = Data::new(&filter, &config);

                // Add commitlog to datalog and add datalog index to filter to
                // datalog index map
                let idx = native.insert(data);
                filter_indexes.insert(filter, idx);
            }
        }

        Ok(DataLog {
            config,
            native,
            publish_filters,
            filter_indexes,
            retained_publishes,
            log_bytes: 0,
            retained_bytes: 0,
            retained_refused: 0,
            lagged: 0,
        })
    }

    /// rdv patch: what this log holds, for [`crate::RouterGauges`].
    pub fn reading(&self) -> crate::GaugeReading {
        crate::GaugeReading {
            filters: self.native.len() as u64,
            log_bytes: self.log_bytes,
            topic_cache: self.publish_filters.len() as u64,
            retained: self.retained_publishes.len() as u64,
            retained_bytes: self.retained_bytes,
            retained_refused: self.retained_refused,
            lagged: self.lagged,
            ..Default::default()
        }
    }

    /// rdv patch: whether `idx` is still the log of `filter` (no
    /// `$share/group/`). A request that outlived its log would otherwise
    /// panic the router (no log at `idx`) or, once the slab gave `idx` to
    /// another filter, read that filter's publications.
    pub fn is_log_of(&self, idx: FilterIdx, filter: &str) -> bool {
        self.native.get(idx).is_some_and(|d| d.filter == filter)
    }

    /// rdv patch: one more subscription reads the log at `idx`.
    pub fn hold(&mut self, idx: FilterIdx) {
        if let Some(data) = self.native.get_mut(idx) {
            data.holders += 1;
        }
    }

    /// rdv patch: one subscription fewer reads `filter`'s log (`$share/g/`
    /// already stripped). When none is left, the log, its index and its
    /// cached topic matches go: a filter no one reads would otherwise keep
    /// up to its full log size for the process's life. A new subscriber
    /// starts at the tail anyway, so nothing it could read is lost.
    /// Returns the index dropped: the caller must drop every request that
    /// still names it, since the slab reuses indexes.
    pub fn release(&mut self, filter: &str) -> Option<FilterIdx> {
        let idx = *self.filter_indexes.get(filter)?;
        let data = self.native.get_mut(idx)?;
        data.holders = data.holders.saturating_sub(1);
        let warm = self
            .config
            .initialized_filters
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == filter));
        if data.holders > 0 || warm {
            // The one that left may have been the only one behind.
            self.log_bytes -= data.clear_if_read();
            return None;
        }
        self.filter_indexes.remove(filter);
        let data = self.native.remove(idx);
        self.log_bytes -= data.log.size();
        let unlink = |v: &mut Vec<FilterIdx>| {
            v.retain(|i| *i != idx);
            !v.is_empty()
        };
        if exact(filter) {
            if let Some(v) = self.publish_filters.get_mut(filter) {
                if !unlink(v) {
                    self.publish_filters.remove(filter);
                }
            }
        } else {
            self.publish_filters.retain(|_, v| unlink(v));
        }
        Some(idx)
    }

    /// rdv patch: appends to the log at `idx`, keeping `log_bytes`.
    pub fn append(
        &mut self,
        idx: FilterIdx,
        item: PublishData,
        notifications: &mut VecDeque<(ConnectionId, DataRequest)>,
    ) -> (Offset, &Filter) {
        // The slab holds every index `matches` returns (release unlinks).
        let data = self.native.get_mut(idx).unwrap();
        let before = data.log.size();
        let (offset, _) = data.append(item, notifications);
        let data = &self.native[idx];
        self.log_bytes = self.log_bytes + data.log.size() - before;
        (offset, &data.filter)
    }

    pub fn meter(&mut self, filter: &str) -> Option<&mut SubscriptionMeter> {
        let data = self.native.get_mut(*self.filter_indexes.get(filter)?)?;
        Some(&mut data.meter)
    }

    pub fn waiters(&self, filter: &Filter) -> Option<&Waiters<DataRequest>> {
        self.native
            .get(*self.filter_indexes.get(filter)?)
            .map(|data| &data.waiters)
    }

    /// rdv patch: `filter` is the subscription as the client wrote it and
    /// `path` the log's filter (without `$share/group/`); only the waiter of
    /// that very subscription goes (upstream looked the log up by the
    /// `$share` name, found none, and left the waiter parked).
    pub fn remove_waiters_for_id(
        &mut self,
        id: ConnectionId,
        path: &str,
        filter: &Filter,
    ) -> Option<DataRequest> {
        let data = self.native.get_mut(*self.filter_indexes.get(path)?)?;
        let waiters = data.waiters.get_mut();

        waiters
            .iter()
            .position(|(conn_id, r)| *conn_id == id && r.filter == *filter)
            .and_then(|index| {
                waiters
                    .swap_remove_back(index)
                    .map(|(_, data_req)| data_req)
            })
    }

    // TODO: Currently returning a Option<Vec> instead of Option<&Vec> due to Rust borrow checker
    // limitation
    pub fn matches(&mut self, topic: &str) -> Option<Vec<usize>> {
        match &self.publish_filters.get(topic) {
            Some(v) => Some(v.to_vec()),
            None => {
                let v: Vec<usize> = self
                    .filter_indexes
                    .iter()
                    .filter(|(filter, _)| matches(topic, filter))
                    .map(|(_, filter_idx)| *filter_idx)
                    .collect();

                if !v.is_empty() {
                    if self.publish_filters.len() >= PUBLISH_FILTERS_CAP {
                        self.publish_filters.clear();
                    }
                    self.publish_filters.insert(topic.to_owned(), v.clone());
                }

                Some(v)
            }
        }
    }

    pub fn next_native_offset(&mut self, filter: &str) -> (FilterIdx, Offset) {
        let publish_filters = &mut self.publish_filters;
        let filter_indexes = &mut self.filter_indexes;

        let (filter_idx, data) = match filter_indexes.get(filter) {
            Some(idx) => (*idx, self.native.get(*idx).unwrap()),
            None => {
                let data = Data::new(filter, &self.config);

                // Add commitlog to datalog and add datalog index to filter to
                // datalog index map
                let idx = self.native.insert(data);
                self.filter_indexes.insert(filter.to_owned(), idx);

                // Match new filter to existing topics and add to publish_filters if it matches
                // (rdv patch: a filter without wildcards matches its own topic only)
                if exact(filter) {
                    if let Some(filters) = publish_filters.get_mut(filter) {
                        filters.push(idx);
                    }
                } else {
                    for (topic, filters) in publish_filters.iter_mut() {
                        if matches(topic, filter) {
                            filters.push(idx);
                        }
                    }
                }

                (idx, self.native.get(idx).unwrap())
            }
        };

        (filter_idx, data.log.next_offset())
    }

    pub fn native_readv(
        &self,
        filter_idx: FilterIdx,
        offset: Offset,
        len: u64,
    ) -> io::Result<(Position, Vec<(PubWithProp, Offset)>)> {
        // unwrap to get index of `self.native` is fine here, because when a new subscribe packet
        // arrives in `Router::handle_device_payload`, it first calls the function
        // `next_native_offset` which creates a new commitlog if one doesn't exist. So any new
        // reads will definitely happen on a valid filter.
        let data = self.native.get(filter_idx).unwrap();
        let mut o = Vec::new();
        // TODO: `readv` is infallible but its current return type does not
        // reflect that. Consequently, this method is also infallible.
        // Encoding this information is important so that calling function
        // has more information on how this method behaves.
        let next = data.log.readv(offset, len, &mut o)?;

        let now = Instant::now();
        o.retain_mut(|(pubdata, _)| {
            // Keep data if no properties exists, which implies no message expiry!
            let Some(properties) = pubdata.properties.as_mut() else {
                return true;
            };

            // Keep data if there is no message_expiry_interval
            let Some(message_expiry_interval) = properties.message_expiry_interval.as_mut() else {
                return true;
            };

            let time_spent = (now - pubdata.timestamp).as_secs() as u32;

            let is_valid = time_spent < *message_expiry_interval;

            // ignore expired messages
            if is_valid {
                // set message_expiry_interval to (original value - time spent waiting in server)
                // ref: https://docs.oasis-open.org/mqtt/mqtt/v5.0/os/mqtt-v5.0-os.html#_Toc3901112
                *message_expiry_interval -= time_spent;
            }

            is_valid
        });

        // no need to include timestamp when returning
        let o = o
            .into_iter()
            .map(|(pubdata, offset)| ((pubdata.publish, pubdata.properties), offset))
            .collect();

        Ok((next, o))
    }

    pub fn shadow(&mut self, filter: &str) -> Option<PubWithProp> {
        let data = self.native.get_mut(*self.filter_indexes.get(filter)?)?;
        data.log.last().map(|p| (p.publish, p.properties))
    }

    /// This method is called when the subscriber has caught up with the commit log. In which case,
    /// instead of actively checking for commits in each `Router::run_inner` iteration, we instead
    /// wait and only try reading again when new messages have been added to the commit log. This
    /// methods converts a `DataRequest` (which actively reads the commit log in `Router::consume`)
    /// to a `Waiter` (which only reads when notified).
    pub fn park(&mut self, id: ConnectionId, request: DataRequest) {
        // calling unwrap on index here is fine, because only place this function is called is in
        // `Router::consume` method, when the status after reading from commit log of the same
        // filter as `request` is "done", that is, the subscriber has caught up. In other words,
        // there has been atleast 1 call to `native_readv` for the same filter, which means if
        // `native_readv` hasn't paniced, so this won't panic either.
        let data = self.native.get_mut(request.filter_idx).unwrap();
        data.waiters.register(id, request);
        // rdv patch: once every subscription reading this log has read all
        // of it, nothing in it is needed any more (a reconnecting persistent
        // session would be one not parked here, so the log stays for it).
        // Freeing it at once keeps memory to what some subscriber still has
        // to read, and lets the allocator reuse warm memory for the next
        // frames instead of touching fresh pages.
        self.log_bytes -= data.clear_if_read();
    }

    /// Cleanup a connection from all the waiters
    pub fn clean(&mut self, id: ConnectionId) -> Vec<DataRequest> {
        let mut inflight = Vec::new();
        for (_, data) in self.native.iter_mut() {
            inflight.append(&mut data.waiters.remove(id));
        }

        inflight
    }

    pub fn insert_to_retained_publishes(
        &mut self,
        publish: Publish,
        publish_properties: Option<PublishProperties>,
        topic: Topic,
    ) {
        let data: PublishData = (publish, publish_properties).into();
        // rdv patch: bounded by `max_retained_bytes`. A publication over the
        // bound is not kept, and the one it would replace goes too (keeping
        // an older message as the topic's last would be wrong).
        self.remove_from_retained_publishes(topic.clone());
        let size = data.size() as u64;
        if self
            .config
            .max_retained_bytes
            .is_some_and(|max| self.retained_bytes + size > max)
        {
            self.retained_refused += 1;
            warn!(topic, "retained message not kept: max_retained_bytes reached");
            return;
        }
        self.retained_bytes += size;
        self.retained_publishes.insert(topic, data);
    }

    pub fn remove_from_retained_publishes(&mut self, topic: Topic) {
        if let Some(old) = self.retained_publishes.remove(&topic) {
            self.retained_bytes -= old.size() as u64;
        }
    }

    pub fn read_retained_messages(&mut self, filter: &str) -> Vec<PubWithProp> {
        trace!(info = "reading retain msg", filter = &filter);
        let now = Instant::now();

        // discard expired retained messages
        let retained_bytes = &mut self.retained_bytes;
        self.retained_publishes.retain(|_, pubdata| {
            // Keep data if no properties exists, which implies no message expiry!
            let Some(properties) = pubdata.properties.as_mut() else {
                return true;
            };

            // Keep data if there is no message_expiry_interval
            let Some(message_expiry_interval) = properties.message_expiry_interval.as_mut() else {
                return true;
            };

            let time_spent = (now - pubdata.timestamp).as_secs() as u32;

            let is_valid = time_spent < *message_expiry_interval;

            // ignore expired messages
            if is_valid {
                // set message_expiry_interval to (original value - time spent waiting in server)
                // ref: https://docs.oasis-open.org/mqtt/mqtt/v5.0/os/mqtt-v5.0-os.html#_Toc3901112
                *message_expiry_interval -= time_spent;
            } else {
                *retained_bytes -= pubdata.size() as u64;
            }

            is_valid
        });

        // no need to include timestamp when returning
        self.retained_publishes
            .iter()
            .filter(|(topic, _)| matches(topic, filter))
            .map(|(_, p)| (p.publish.clone(), p.properties.clone()))
            .collect()
    }
}

pub struct Data<T> {
    filter: Filter,
    /// rdv patch: subscriptions (live or saved) that read this log.
    holders: usize,
    pub log: CommitLog<T>,
    pub waiters: Waiters<DataRequest>,
    meter: SubscriptionMeter,
}

impl<T> Data<T>
where
    T: Storage + Clone,
{
    pub fn new(filter: &str, router_config: &RouterConfig) -> Data<T> {
        let mut max_segment_size = router_config.max_segment_size;
        let mut max_mem_segments = router_config.max_segment_count;

        // Override segment config for selected filter
        if let Some(config) = &router_config.custom_segment {
            for (f, segment_config) in config {
                if matches(filter, f) {
                    info!("Overriding segment config for filter: {}", filter);
                    max_segment_size = segment_config.max_segment_size;
                    max_mem_segments = segment_config.max_segment_count;
                }
            }
        }

        // max_segment_size: usize, max_mem_segments: usize
        let log = CommitLog::new(max_segment_size, max_mem_segments).unwrap();

        let waiters = Waiters::with_capacity(10);
        let metrics = SubscriptionMeter::default();
        Data {
            filter: filter.to_owned(),
            holders: 0,
            log,
            waiters,
            meter: metrics,
        }
    }

    /// rdv patch: empties the log once every subscription reading it has
    /// read all of it (all are parked as caught up, none is a shared
    /// group's); returns the bytes freed. A persistent session away from
    /// the broker is a holder that is not parked, so the log stays for it.
    fn clear_if_read(&mut self) -> u64 {
        if self.waiters.waiters().len() != self.holders {
            return 0;
        }
        let next = self.log.next_offset();
        let all_read = self
            .waiters
            .waiters()
            .iter()
            .all(|(_, r)| r.group.is_none() && r.cursor == next);
        if all_read { self.log.clear() } else { 0 }
    }

    /// Writes to all the filters that are mapped to this publish topic
    /// and wakes up consumers that are matching this topic (if they exist)
    pub fn append(
        &mut self,
        item: T,
        notifications: &mut VecDeque<(ConnectionId, DataRequest)>,
    ) -> (Offset, &Filter) {
        let size = item.size();
        let offset = self.log.append(item);
        if let Some(mut parked) = self.waiters.take() {
            notifications.append(&mut parked);
        }

        self.meter.count += 1;
        self.meter.total_size += size;

        (offset, &self.filter)
    }
}

/// Acks log for a subscription
#[derive(Debug)]
pub struct AckLog {
    // Committed acks per connection. First pkid, last pkid, data
    committed: VecDeque<Ack>,
    // Recorded qos 2 publishes
    recorded: VecDeque<(Publish, Option<PublishProperties>)>,
}

impl AckLog {
    /// New log
    pub fn new() -> AckLog {
        AckLog {
            committed: VecDeque::with_capacity(100),
            recorded: VecDeque::with_capacity(100),
        }
    }

    pub fn connack(&mut self, id: ConnectionId, ack: ConnAck, props: Option<ConnAckProperties>) {
        let ack = Ack::ConnAck(id, ack, props);
        self.committed.push_back(ack);
    }

    pub fn suback(&mut self, ack: SubAck) {
        let ack = Ack::SubAck(ack);
        self.committed.push_back(ack);
    }

    pub fn puback(&mut self, ack: PubAck) {
        let ack = Ack::PubAck(ack);
        self.committed.push_back(ack);
    }

    pub fn pubrec(&mut self, publish: Publish, props: Option<PublishProperties>, ack: PubRec) {
        let ack = Ack::PubRec(ack);
        self.recorded.push_back((publish, props));
        self.committed.push_back(ack);
    }

    pub fn pubrel(&mut self, ack: PubRel) {
        let ack = Ack::PubRel(ack);
        self.committed.push_back(ack);
    }

    pub fn pubcomp(&mut self, ack: PubComp) -> Option<(Publish, Option<PublishProperties>)> {
        let ack = Ack::PubComp(ack);
        self.committed.push_back(ack);
        self.recorded.pop_front()
    }

    pub fn pingresp(&mut self, ack: PingResp) {
        let ack = Ack::PingResp(ack);
        self.committed.push_back(ack);
    }

    pub fn unsuback(&mut self, ack: UnsubAck) {
        let ack = Ack::UnsubAck(ack);
        self.committed.push_back(ack);
    }

    pub fn readv(&mut self) -> &mut VecDeque<Ack> {
        &mut self.committed
    }
}

#[cfg(test)]
mod test {
    use super::DataLog;
    use crate::router::shared_subs::Strategy;
    use crate::RouterConfig;

    #[test]
    fn publish_filters_updating_correctly_on_new_topic_subscription() {
        let config = RouterConfig {
            max_segment_size: 1024,
            max_connections: 10,
            max_segment_count: 10,
            max_outgoing_packet_count: 1024,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Strategy::RoundRobin,
            max_retained_bytes: None,
        };
        let mut data = DataLog::new(config).unwrap();
        data.next_native_offset("topic/a");
        data.matches("topic/a");

        data.next_native_offset("topic/+");

        assert_eq!(data.publish_filters.get("topic/a").unwrap().len(), 2);
    }

    #[test]
    fn publish_filters_updating_correctly_on_new_publish() {
        let config = RouterConfig {
            max_segment_size: 1024,
            max_connections: 10,
            max_segment_count: 10,
            max_outgoing_packet_count: 1024,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Strategy::RoundRobin,
            max_retained_bytes: None,
        };
        let mut data = DataLog::new(config).unwrap();
        data.next_native_offset("+/+");

        data.matches("topic/a");

        assert_eq!(data.publish_filters.get("topic/a").unwrap().len(), 1);
    }

    //     #[test]
    //     fn appends_are_written_to_correct_commitlog() {
    //         pretty_env_logger::init();
    //         let config = RouterConfig {
    //             instant_ack: true,
    //             max_segment_size: 1024,
    //             max_connections: 10,
    //             max_mem_segments: 10,
    //             max_disk_segments: 0,
    //             max_read_len: 1024,
    //             log_dir: None,
    //             dynamic_log: true,
    //         };

    //         let mut data = DataLog::new(config).unwrap();
    //         data.next_native_offset("/devices/2321/actions");
    //         for i in 0..2 {
    //             let publish = Publish::new("/devices/2321/events/imu/jsonarray", QoS::AtLeastOnce, vec![1, 2, 3]);
    //             let v = data.native_append(publish);
    //             dbg!(v);
    //         }

    //         for i in 0..2 {
    //             let publish = Publish::new("/devices/2321/actions", QoS::AtLeastOnce, vec![1, 2, 3]);
    //             let v = data.native_append(publish);
    //             dbg!(v);
    //         }
    //     }
}
