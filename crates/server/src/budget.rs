//! The node-wide budget for connection buffers: unfinished input (a frame
//! announced but not all received yet), buffered output (answers the client
//! has not read yet), the buffers of stream jobs and the inflation of
//! compressed (type 4) messages.
//!
//! Each connection's first [`CONNECTION_FREE_BYTES`] of input buffer and of
//! output buffer are its own and are not counted, so request/response
//! traffic with ordinary records never touches the shared counter. Anything
//! larger is charged: input, inflation and stream jobs before the memory is
//! allocated, output right after the answer is built. When the budget is
//! spent, a connection that needs more stops reading (what its client sends
//! waits in the kernel's socket buffer) until room is released. Meanwhile
//! the enforcer ([`Budget::enforce`], every [`ENFORCE_TICK`]) closes the
//! connections that have held charged bytes the longest (slow senders,
//! clients that do not read their answers) until the waiting requests fit
//! and the forced output charges are back under the limit. A request that
//! could never fit closes its own connection.

use crate::system::system_memory_bytes;
use bolide_wire::frame::{ProtoHeader, PROTO_HEADER_BYTES};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Bytes of input buffer and of output buffer each connection may keep
/// without charging the budget.
pub const CONNECTION_FREE_BYTES: usize = 32 * 1024;
/// Size of a fresh buffer, and of each read while no frame asks for more.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;
/// The default budget is the smaller of this and 5% of the machine's memory.
pub const DEFAULT_BUDGET_BYTES_MAX: u64 = 256 << 20;
/// A connection is closed to make room only once it has held charged bytes
/// this long: a fast client finishes its large frame well within it.
pub const HOLD_BEFORE_CLOSE: Duration = Duration::from_secs(1);
/// How often the enforcer looks at the budget.
pub const ENFORCE_TICK: Duration = Duration::from_millis(100);
/// A waiting connection checks whether it was closed at least this often.
const WAIT_STEP: Duration = Duration::from_millis(50);

/// The node's budget. One per node, shared by every event loop.
pub struct Budget {
    limit_bytes: u64,
    used_bytes: AtomicU64,
    /// Bytes that waiting connections asked for and did not get yet.
    wanted_bytes: AtomicU64,
    holders: Mutex<Vec<Holder>>,
    next_id: AtomicU64,
    room: Notify,
    /// Times a connection had to wait for room.
    pub waits: AtomicU64,
    /// Connections closed to make room, or because one request needed more
    /// than the whole budget.
    pub closed: AtomicU64,
}

/// A connection that holds charged bytes.
struct Holder {
    id: u64,
    since: Instant,
    state: Arc<HolderState>,
    /// A duplicate of the connection's socket, to shut it down from here.
    socket: Option<OwnedFd>,
}

#[derive(Default)]
struct HolderState {
    bytes: AtomicU64,
    closed: AtomicBool,
}

/// Why a connection got no room.
#[derive(Debug)]
pub enum NoRoom {
    /// The node closed the connection to make room for others.
    Closed,
    /// The request needs more than the whole budget.
    TooLarge { bytes: u64 },
}

/// What one [`Budget::enforce`] pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EnforceReport {
    pub used_bytes: u64,
    pub wanted_bytes: u64,
    pub closed: usize,
}

impl Budget {
    pub fn new(limit_bytes: u64) -> Budget {
        Budget {
            limit_bytes,
            used_bytes: AtomicU64::new(0),
            wanted_bytes: AtomicU64::new(0),
            holders: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            room: Notify::new(),
            waits: AtomicU64::new(0),
            closed: AtomicU64::new(0),
        }
    }

    /// The smaller of 256 MiB and 5% of the machine's memory.
    pub fn default_limit_bytes() -> u64 {
        let (total, _) = system_memory_bytes();
        match total / 20 {
            0 => DEFAULT_BUDGET_BYTES_MAX,
            share => share.min(DEFAULT_BUDGET_BYTES_MAX),
        }
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Relaxed)
    }

    /// Charges `bytes` if they fit under the limit.
    fn try_charge(&self, bytes: u64) -> bool {
        let mut used = self.used_bytes.load(Relaxed);
        loop {
            let Some(next) = used.checked_add(bytes).filter(|&n| n <= self.limit_bytes) else {
                return false;
            };
            match self
                .used_bytes
                .compare_exchange_weak(used, next, Relaxed, Relaxed)
            {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
    }

    fn charge_forced(&self, bytes: u64) {
        self.used_bytes.fetch_add(bytes, Relaxed);
    }

    fn release(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let before = self.used_bytes.fetch_sub(bytes, Relaxed);
        debug_assert!(before >= bytes, "budget released more than it charged");
        self.room.notify_waiters();
    }

    /// Closes the connections that have held charged bytes longest (at
    /// least [`HOLD_BEFORE_CLOSE`]) until what is used and wanted fits the
    /// limit again.
    pub fn enforce(&self, now: Instant) -> EnforceReport {
        let used_bytes = self.used_bytes.load(Relaxed);
        let wanted_bytes = self.wanted_bytes.load(Relaxed);
        let mut report = EnforceReport {
            used_bytes,
            wanted_bytes,
            closed: 0,
        };
        if used_bytes + wanted_bytes <= self.limit_bytes {
            return report;
        }
        let Ok(holders) = self.holders.lock() else {
            return report;
        };
        // Connections already closed give their bytes back as they end.
        let leaving: u64 = holders
            .iter()
            .filter(|holder| holder.state.closed.load(Relaxed))
            .map(|holder| holder.state.bytes.load(Relaxed))
            .sum();
        let mut excess = (used_bytes + wanted_bytes).saturating_sub(self.limit_bytes + leaving);
        let mut candidates: Vec<&Holder> = holders
            .iter()
            .filter(|holder| !holder.state.closed.load(Relaxed))
            .filter(|holder| now.saturating_duration_since(holder.since) >= HOLD_BEFORE_CLOSE)
            .collect();
        candidates.sort_by_key(|holder| holder.since);
        for holder in candidates {
            if excess == 0 {
                break;
            }
            holder.state.closed.store(true, Relaxed);
            if let Some(socket) = &holder.socket {
                // Ends the connection's pending read or write at once; its
                // task then drops its buffers and gives the bytes back.
                let _ = socket2::SockRef::from(socket).shutdown(std::net::Shutdown::Both);
            }
            excess = excess.saturating_sub(holder.state.bytes.load(Relaxed));
            report.closed += 1;
            self.closed.fetch_add(1, Relaxed);
            tracing::debug!(
                connection = holder.id,
                "closing a connection to free buffer budget"
            );
        }
        drop(holders);
        // Closed connections waiting for room notice it at their next step.
        self.room.notify_waiters();
        report
    }

    /// Runs [`Budget::enforce`] every [`ENFORCE_TICK`] and logs, at most
    /// once a second, that the budget was spent.
    pub fn run_enforcer(&self) {
        let mut last_log = Instant::now();
        let mut closed_since_log = 0usize;
        let mut waits_logged = self.waits.load(Relaxed);
        loop {
            std::thread::sleep(ENFORCE_TICK);
            let report = self.enforce(Instant::now());
            closed_since_log += report.closed;
            let waits = self.waits.load(Relaxed);
            let pressure = closed_since_log > 0 || waits != waits_logged;
            if pressure && last_log.elapsed() >= Duration::from_secs(1) {
                tracing::warn!(
                    used_bytes = report.used_bytes,
                    limit_bytes = self.limit_bytes,
                    waits = waits - waits_logged,
                    closed = closed_since_log,
                    "connection buffers at their budget (proto-buffer-budget): \
                     connections waited for room or were closed"
                );
                last_log = Instant::now();
                closed_since_log = 0;
                waits_logged = waits;
            }
        }
    }
}

/// One connection's share of the budget. Dropping it gives everything back.
pub struct ConnectionBudget<'n> {
    budget: &'n Budget,
    holder: Option<(u64, Arc<HolderState>)>,
    input_bytes: u64,
    output_bytes: u64,
    job_bytes: u64,
    /// Charged ahead for a compressed frame the connection waited for.
    inflation_bytes: u64,
}

/// Bytes charged for inflating one compressed message, given back on drop.
pub struct Inflation<'b> {
    budget: &'b Budget,
    bytes: u64,
}

impl Drop for Inflation<'_> {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

impl<'n> ConnectionBudget<'n> {
    pub fn new(budget: &'n Budget) -> ConnectionBudget<'n> {
        ConnectionBudget {
            budget,
            holder: None,
            input_bytes: 0,
            output_bytes: 0,
            job_bytes: 0,
            inflation_bytes: 0,
        }
    }

    fn charged(&self) -> u64 {
        self.input_bytes + self.output_bytes + self.job_bytes + self.inflation_bytes
    }

    /// Whether the node closed this connection to make room.
    pub fn is_closed(&self) -> bool {
        self.holder
            .as_ref()
            .is_some_and(|(_, state)| state.closed.load(Relaxed))
    }

    /// Makes room in `input` for the next read: at least what the frame
    /// being received still needs, up to [`READ_CHUNK_BYTES`] or, for a
    /// large frame, as much as is already there (so the buffer doubles).
    /// Capacity above the allowance is charged first, waiting for room.
    // PERF: hot path: within the allowance this is a few compares.
    pub async fn make_room(
        &mut self,
        input: &mut Input,
        socket: Option<BorrowedFd<'_>>,
    ) -> Result<(), NoRoom> {
        input.compact();
        let wanted = input.wanted_capacity();
        let capacity = input.capacity();
        if capacity <= CONNECTION_FREE_BYTES && wanted <= CONNECTION_FREE_BYTES {
            if wanted > capacity {
                input.grow_to(wanted);
            }
            return Ok(());
        }
        self.make_room_charged(input, wanted, socket).await
    }

    async fn make_room_charged(
        &mut self,
        input: &mut Input,
        wanted: usize,
        socket: Option<BorrowedFd<'_>>,
    ) -> Result<(), NoRoom> {
        if wanted <= CONNECTION_FREE_BYTES {
            // The large frame is done: back to a small buffer.
            input.shrink_to(wanted.max(READ_CHUNK_BYTES));
            let charged = std::mem::take(&mut self.input_bytes);
            self.give_back(charged);
            return Ok(());
        }
        if wanted <= input.capacity() {
            return Ok(());
        }
        let over = (wanted - CONNECTION_FREE_BYTES) as u64;
        let more = over.saturating_sub(self.input_bytes);
        self.reserve(more, socket).await?;
        self.input_bytes += more;
        self.holder_bytes_changed();
        input.grow_to(wanted);
        Ok(())
    }

    /// Charges the output buffer's capacity above the allowance (the
    /// answers are built already; this may take the budget over its limit
    /// until the enforcer closes connections).
    // PERF: hot path: one compare within the allowance.
    pub fn charge_output(
        &mut self,
        output: &[u8],
        capacity: usize,
        socket: Option<BorrowedFd<'_>>,
    ) {
        debug_assert!(output.len() <= capacity);
        let over = capacity.saturating_sub(CONNECTION_FREE_BYTES) as u64;
        if over > self.output_bytes {
            let more = over - self.output_bytes;
            self.budget.charge_forced(more);
            self.output_bytes = over;
            self.register(socket);
            self.holder_bytes_changed();
        }
    }

    /// After the output was written: a buffer larger than the allowance
    /// goes back to its initial size and its charge is given back.
    // PERF: hot path: one compare within the allowance.
    pub fn settle_output(&mut self, output: &mut Vec<u8>) {
        debug_assert!(output.is_empty());
        if output.capacity() > CONNECTION_FREE_BYTES {
            *output = Vec::with_capacity(READ_CHUNK_BYTES);
        }
        let charged = std::mem::take(&mut self.output_bytes);
        self.give_back(charged);
    }

    /// Charges a stream job's buffers, waiting for room.
    pub async fn reserve_job(
        &mut self,
        bytes: u64,
        socket: Option<BorrowedFd<'_>>,
    ) -> Result<(), NoRoom> {
        self.reserve(bytes, socket).await?;
        self.job_bytes += bytes;
        self.holder_bytes_changed();
        Ok(())
    }

    /// Gives back a finished stream job's charge.
    pub fn release_job(&mut self) {
        let charged = std::mem::take(&mut self.job_bytes);
        self.give_back(charged);
    }

    /// Waits until `bytes` fit and charges them ahead for a compressed
    /// frame (see [`ConnectionBudget::inflation`]).
    pub async fn reserve_inflation(
        &mut self,
        bytes: u64,
        socket: Option<BorrowedFd<'_>>,
    ) -> Result<(), NoRoom> {
        self.reserve(bytes, socket).await?;
        self.inflation_bytes += bytes;
        self.holder_bytes_changed();
        Ok(())
    }

    /// Room to inflate a compressed message whose body is `body`: taken
    /// from what was charged ahead, else from the budget if it fits now.
    /// `Err(bytes)`: wait for that much room
    /// ([`ConnectionBudget::reserve_inflation`]), then try again.
    pub fn inflation(&mut self, body: &[u8]) -> Result<Inflation<'n>, u64> {
        let bytes = declared_inflated_bytes(body);
        if self.inflation_bytes >= bytes {
            let charged = std::mem::take(&mut self.inflation_bytes);
            self.deregister_if_empty();
            // Anything charged beyond this message goes back with it.
            return Ok(Inflation {
                budget: self.budget,
                bytes: charged,
            });
        }
        if self.budget.try_charge(bytes) {
            return Ok(Inflation {
                budget: self.budget,
                bytes,
            });
        }
        Err(bytes)
    }

    /// Waits until `bytes` fit, then charges them; registers the
    /// connection as a holder.
    async fn reserve(&mut self, bytes: u64, socket: Option<BorrowedFd<'_>>) -> Result<(), NoRoom> {
        if bytes == 0 {
            return Ok(());
        }
        if self.charged() + bytes > self.budget.limit_bytes {
            self.budget.closed.fetch_add(1, Relaxed);
            return Err(NoRoom::TooLarge {
                bytes: self.charged() + bytes,
            });
        }
        // Registered before waiting, so that what this connection already
        // holds can be taken back if it waits too long.
        if self.charged() > 0 {
            self.register(socket);
        }
        let mut waiting = None;
        loop {
            if self.is_closed() {
                return Err(NoRoom::Closed);
            }
            if self.budget.try_charge(bytes) {
                drop(waiting);
                self.register(socket);
                return Ok(());
            }
            if waiting.is_none() {
                self.budget.waits.fetch_add(1, Relaxed);
                waiting = Some(Wanted::new(self.budget, bytes));
            }
            let _ = tokio::time::timeout(WAIT_STEP, self.budget.room.notified()).await;
        }
    }

    fn register(&mut self, socket: Option<BorrowedFd<'_>>) {
        if self.holder.is_some() {
            return;
        }
        let id = self.budget.next_id.fetch_add(1, Relaxed);
        let state = Arc::new(HolderState::default());
        let holder = Holder {
            id,
            since: Instant::now(),
            state: state.clone(),
            socket: socket.and_then(|fd| fd.try_clone_to_owned().ok()),
        };
        if let Ok(mut holders) = self.budget.holders.lock() {
            holders.push(holder);
        }
        self.holder = Some((id, state));
    }

    fn holder_bytes_changed(&self) {
        if let Some((_, state)) = &self.holder {
            state.bytes.store(self.charged(), Relaxed);
        }
    }

    fn give_back(&mut self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.budget.release(bytes);
        self.holder_bytes_changed();
        self.deregister_if_empty();
    }

    fn deregister_if_empty(&mut self) {
        if self.charged() > 0 {
            return;
        }
        // A closed holder stays closed: the connection is on its way out.
        if self.is_closed() {
            return;
        }
        let Some((id, _)) = self.holder.take() else {
            return;
        };
        if let Ok(mut holders) = self.budget.holders.lock() {
            holders.retain(|holder| holder.id != id);
        }
    }
}

impl Drop for ConnectionBudget<'_> {
    fn drop(&mut self) {
        let charged = self.charged();
        self.budget.release(charged);
        if let Some((id, _)) = self.holder.take() {
            if let Ok(mut holders) = self.budget.holders.lock() {
                holders.retain(|holder| holder.id != id);
            }
        }
    }
}

/// Bytes a waiting connection asked for, counted while it waits.
struct Wanted<'b> {
    budget: &'b Budget,
    bytes: u64,
}

impl<'b> Wanted<'b> {
    fn new(budget: &'b Budget, bytes: u64) -> Wanted<'b> {
        budget.wanted_bytes.fetch_add(bytes, Relaxed);
        Wanted { budget, bytes }
    }
}

impl Drop for Wanted<'_> {
    fn drop(&mut self) {
        self.budget.wanted_bytes.fetch_sub(self.bytes, Relaxed);
    }
}

/// The uncompressed size a type-4 body declares (its first 8 bytes), or
/// 0 when it declares more than a frame may hold (it is refused unread).
pub fn declared_inflated_bytes(body: &[u8]) -> u64 {
    let Some(length) = body.first_chunk::<8>() else {
        return 0;
    };
    let length = u64::from_be_bytes(*length);
    if length > bolide_types::PROTO_BODY_BYTES_MAX + PROTO_HEADER_BYTES as u64 {
        return 0;
    }
    length
}

/// A connection's input buffer: received bytes not yet answered, from
/// `start`. Its capacity is exactly its allocation, so what it charges to
/// the budget is what it holds.
pub struct Input {
    bytes: Vec<u8>,
    start: usize,
}

impl Default for Input {
    fn default() -> Input {
        Input {
            bytes: Vec::with_capacity(READ_CHUNK_BYTES),
            start: 0,
        }
    }
}

impl Input {
    /// The bytes received and not yet consumed.
    // PERF: hot path.
    pub fn data(&self) -> &[u8] {
        self.bytes.get(self.start..).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.bytes.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Consumes `count` bytes (a frame that was answered).
    // PERF: hot path.
    pub fn consume(&mut self, count: usize) {
        self.start = (self.start + count).min(self.bytes.len());
        if self.start == self.bytes.len() {
            self.bytes.clear();
            self.start = 0;
        }
    }

    /// Appends bytes (tests and fuzzing feed input this way).
    pub fn extend(&mut self, bytes: &[u8]) {
        self.compact();
        self.bytes.extend_from_slice(bytes);
    }

    /// The buffer to read into; its spare capacity is the room for the read.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    /// Moves unconsumed bytes to the front, so the whole capacity after
    /// them is free for the next read.
    fn compact(&mut self) {
        if self.start > 0 {
            self.bytes.copy_within(self.start.., 0);
            self.bytes.truncate(self.bytes.len() - self.start);
            self.start = 0;
        }
    }

    /// The capacity the next read wants: the rest of the frame being
    /// received, at most [`READ_CHUNK_BYTES`] or what is already there
    /// (whichever is more), and a full chunk when no frame is under way.
    fn wanted_capacity(&self) -> usize {
        let length = self.len();
        let rest = match frame_total(self.data()) {
            Some(total) if total > length => total - length,
            _ => READ_CHUNK_BYTES,
        };
        length + rest.min(length.max(READ_CHUNK_BYTES))
    }

    fn grow_to(&mut self, capacity: usize) {
        debug_assert_eq!(self.start, 0);
        self.bytes
            .reserve_exact(capacity.saturating_sub(self.bytes.len()));
    }

    fn shrink_to(&mut self, capacity: usize) {
        let mut fresh = Vec::with_capacity(capacity.max(self.len()));
        fresh.extend_from_slice(self.data());
        self.bytes = fresh;
        self.start = 0;
    }
}

/// The total length of the frame `data` starts with, once its header is
/// there and valid.
fn frame_total(data: &[u8]) -> Option<usize> {
    let header = ProtoHeader::decode(data.first_chunk::<PROTO_HEADER_BYTES>()?).ok()?;
    Some(PROTO_HEADER_BYTES + header.body_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_header(body_bytes: usize) -> [u8; 8] {
        ProtoHeader::encode(bolide_wire::frame::MessageType::Message, body_bytes)
    }

    #[test]
    fn charges_fit_under_the_limit_only() {
        let budget = Budget::new(100);
        assert!(budget.try_charge(60));
        assert!(!budget.try_charge(41));
        assert!(budget.try_charge(40));
        assert_eq!(budget.used_bytes(), 100);
        budget.release(100);
        assert_eq!(budget.used_bytes(), 0);
    }

    #[test]
    fn input_grows_by_doubling_up_to_the_frame_and_charges_above_the_allowance() {
        let budget = Budget::new(1 << 30);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let mut connection = ConnectionBudget::new(&budget);
        let mut input = Input::default();
        let frame = 1 << 20;
        input.extend(&frame_header(frame - 8));
        let mut capacities = Vec::new();
        while input.len() < frame {
            runtime
                .block_on(connection.make_room(&mut input, None))
                .expect("room");
            let spare = input.capacity() - input.len();
            assert!(spare > 0);
            input.extend(&vec![0u8; spare.min(frame - input.len())]);
            capacities.push(input.capacity());
            let charged = input.capacity().saturating_sub(CONNECTION_FREE_BYTES) as u64;
            assert_eq!(budget.used_bytes(), charged);
        }
        // Never more than twice what arrived (plus a first chunk), never
        // beyond the frame.
        assert_eq!(capacities.last(), Some(&frame));
        for pair in capacities.windows(2) {
            assert!(
                pair[1] <= 2 * pair[0].max(READ_CHUNK_BYTES),
                "{capacities:?}"
            );
        }
        input.consume(frame);
        runtime
            .block_on(connection.make_room(&mut input, None))
            .expect("room");
        assert_eq!(input.capacity(), READ_CHUNK_BYTES);
        assert_eq!(budget.used_bytes(), 0);
    }

    #[test]
    fn a_frame_larger_than_the_budget_is_refused() {
        let budget = Budget::new(256 * 1024);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let mut connection = ConnectionBudget::new(&budget);
        let mut input = Input::default();
        input.extend(&frame_header(8 << 20));
        let result: Result<(), NoRoom> = runtime.block_on(async {
            loop {
                connection.make_room(&mut input, None).await?;
                let spare = input.capacity() - input.len();
                input.extend(&vec![1u8; spare]);
            }
        });
        assert!(matches!(result, Err(NoRoom::TooLarge { .. })), "{result:?}");
        assert_eq!(budget.closed.load(Relaxed), 1);
        drop(connection);
        assert_eq!(budget.used_bytes(), 0);
    }

    #[test]
    fn enforce_closes_the_oldest_holders_until_the_excess_is_covered() {
        let budget = Budget::new(1000);
        let mut connections: Vec<ConnectionBudget<'_>> =
            (0..3).map(|_| ConnectionBudget::new(&budget)).collect();
        for connection in &mut connections {
            let output = vec![0u8; 10];
            connection.charge_output(&output, CONNECTION_FREE_BYTES + 400, None);
        }
        assert_eq!(budget.used_bytes(), 1200);
        // Nothing is closed before it has held its bytes long enough.
        assert_eq!(budget.enforce(Instant::now()).closed, 0);
        let later = Instant::now() + HOLD_BEFORE_CLOSE;
        let report = budget.enforce(later);
        assert_eq!(report.closed, 1);
        assert!(connections[0].is_closed());
        assert!(!connections[1].is_closed());
        assert!(!connections[2].is_closed());
        // The closed one gives its bytes back when it ends.
        connections.remove(0);
        assert_eq!(budget.used_bytes(), 800);
        assert_eq!(budget.enforce(later).closed, 0);
    }

    #[test]
    fn inflation_is_charged_while_the_message_is_inflated() {
        let budget = Budget::new(1 << 20);
        let mut connection = ConnectionBudget::new(&budget);
        let mut body = (600_000u64).to_be_bytes().to_vec();
        body.extend_from_slice(b"zlib");
        let first = connection.inflation(&body).expect("fits");
        assert_eq!(budget.used_bytes(), 600_000);
        assert_eq!(connection.inflation(&body).err(), Some(600_000));
        drop(first);
        assert_eq!(budget.used_bytes(), 0);
        let too_large = (u64::MAX).to_be_bytes();
        assert_eq!(declared_inflated_bytes(&too_large), 0);
    }
}
