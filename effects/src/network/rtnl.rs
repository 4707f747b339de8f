//! Synchronous rtnetlink for the enforcement namespace (spec 3.7).
//!
//! The Runtime Supervisor installs the derived policy's IPv4 routes with
//! [`RouteSys::add_route`] and then observes the evidence of spec 3.7's
//! "Linux policy state" row: a versioned policy-semantic rtnetlink
//! projection ([`PolicyProjection`]) that must exactly match the derived
//! policy and the fixed topology.
//!
//! The projection keeps what decides where a packet goes: destination,
//! table, route type, priority (precedence) and next hop of every IPv4 route
//! outside the local table, and every IPv6 address and route. It excludes
//! - counters and cache state: `RTA_CACHEINFO`, metrics, cloned (exception)
//!   entries, neighbours;
//! - presentation: protocol, scope, preferred source, next-hop state flags
//!   (`linkdown`, `dead`), attribute order;
//! - the IPv4 local table (255), which the kernel derives from the addresses
//!   themselves (local, broadcast and loopback routes).
//!
//! An IPv4 route the projection cannot express exactly is refused with
//! [`RtnlError::UnsupportedRoute`], never dropped: no output device
//! (blackhole, unreachable, prohibit, throw), multipath, a next-hop object
//! (`nhid`), a lightweight-tunnel encapsulation, an `RTA_VIA` next hop, a TOS
//! or source selector, or any attribute this module does not know. The exact
//! comparison then fails loudly instead of passing over a route it never saw.
//!
//! For spec 3.7's canary the supervisor also creates a veth pair
//! ([`RouteSys::create_veth`]) whose peer lives in another namespace, and
//! keeps the link's versioned creation record ([`LinkRecord`]). Evidence
//! row "Exact cleanup": [`RouteSys::delete_link`] deletes the link only
//! while its current rtnetlink shape equals that record in every field,
//! and refuses otherwise ([`RtnlError::LinkShapeChanged`]); namespace and
//! interface index alone are insufficient.
//!
//! Every kernel interaction goes through [`RouteSys`]. [`NetlinkRoutes`] is
//! the real implementation; [`RecordingRoutes`] is the recording fake that
//! tests pass in. [`NetlinkRoutes`] opens one blocking `NETLINK_ROUTE` socket
//! per call, so each call acts in the network namespace of the calling
//! thread at that moment. There is no async runtime: the supervisor is
//! synchronous.
//!
//! Protocol discipline, for every exchange:
//! - each request carries `NLM_F_REQUEST` and a fresh sequence number;
//!   changes and single gets also carry `NLM_F_ACK` and are complete only on
//!   the kernel's ACK, and additions carry `NLM_F_CREATE | NLM_F_EXCL`, so an
//!   existing route is `EEXIST`, never silently replaced;
//! - dumps are complete only on `NLMSG_DONE` with a zero code; an
//!   interrupted dump (`NLM_F_DUMP_INTR`) is an error, not a partial answer;
//! - every reply must come from the kernel (port 0), be addressed to this
//!   socket's port, and carry the request's sequence number;
//! - every receive has a timeout, every datagram is checked for truncation,
//!   and every exchange has a message and byte bound;
//! - the socket asks for strict request checking (`NETLINK_GET_STRICT_CHK`),
//!   capped ACKs and extended ACK text, which [`RtnlError::Kernel`] keeps.
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lazaret_runtime::config::Ipv4Prefix;
use lazaret_runtime::network::{
    LinkRecord, PolicyProjection, ProjectedRoute, RouteNextHop, LINK_RECORD_VERSION,
};
use netlink_packet_core::{
    parse_string, DecodeError, ErrorMessage, NetlinkBuffer, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, Nla, NlasIterator, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_CREATE,
    NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_EXCL, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::{Socket, SocketAddr};
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::sockopt::{set_socket_timeout, Timeout};
use rustix::net::RecvFlags;

/// The main routing table.
pub const RT_TABLE_MAIN: u32 = 254;
/// The local routing table; outside the projection.
pub const RT_TABLE_LOCAL: u32 = 255;
/// `RTN_UNICAST`: the only route type [`RouteSys::add_route`] installs.
pub const RTN_UNICAST: u8 = 1;

/// Receive buffer per datagram. The kernel caps dump datagrams at 32 KiB;
/// a larger datagram is reported as truncated, never half-parsed.
const RECEIVE_BYTES: usize = 64 * 1024;
/// How long one receive may wait for the kernel.
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many interrupted (`EINTR`) receives one exchange tolerates.
const RECEIVE_INTERRUPTS_MAX: u32 = 16;
/// Messages in the reply to a change or a single get (reply plus ACK).
const ACK_MESSAGES_MAX: usize = 16;
/// Messages in one dump.
const DUMP_MESSAGES_MAX: usize = 65_536;
/// Bytes in one dump.
const DUMP_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Size of `struct nlmsghdr`.
const NETLINK_HEADER_BYTES: usize = 16;
/// `NLMSGERR_ATTR_MSG`: the extended ACK's text.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// Attributes read from one extended ACK.
const EXTENDED_ACK_ATTRIBUTES_MAX: usize = 32;

/// The kind [`RouteSys::create_veth`] creates (`IFLA_INFO_KIND`).
pub const VETH_KIND: &str = "veth";
/// The MAC address of every link the fake creates.
pub const RECORDING_VETH_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
/// The MTU of every link the fake creates.
pub const RECORDING_VETH_MTU: u32 = 1500;
/// The peer index of every link the fake creates.
pub const RECORDING_VETH_PEER_INDEX: u32 = 2;
/// The peer namespace ID of every link the fake creates.
pub const RECORDING_VETH_PEER_NAMESPACE_ID: i32 = 0;

const REQUEST_GET_LINK: &str = "RTM_GETLINK";
const REQUEST_GET_LINK_RECORD: &str = "RTM_GETLINK (link record)";
const REQUEST_DUMP_LINKS: &str = "RTM_GETLINK dump";
const REQUEST_SET_LINK: &str = "RTM_SETLINK";
const REQUEST_NEW_VETH: &str = "RTM_NEWLINK (veth)";
const REQUEST_DEL_LINK: &str = "RTM_DELLINK";
const REQUEST_NEW_ADDRESS: &str = "RTM_NEWADDR (IPv4)";
const REQUEST_NEW_ROUTE: &str = "RTM_NEWROUTE";
const REQUEST_DEL_ROUTE: &str = "RTM_DELROUTE";
const REQUEST_DUMP_IPV4_ROUTES: &str = "RTM_GETROUTE dump (IPv4)";
const REQUEST_DUMP_IPV6_ROUTES: &str = "RTM_GETROUTE dump (IPv6)";
const REQUEST_DUMP_IPV6_ADDRESSES: &str = "RTM_GETADDR dump (IPv6)";
/// The request a whole [`RouteSys::observe`] stands for in the fake.
const REQUEST_OBSERVE: &str = "observe";

/// The rtnetlink effects the Runtime Supervisor needs in the enforcement
/// namespace.
pub trait RouteSys {
    /// Sets the link up (loopback before anything else).
    fn set_link_up(&self, name: &str) -> Result<(), RtnlError>;
    /// Sets the link down: it passes no traffic from the return on (the
    /// canary link before its deletion).
    fn set_link_down(&self, name: &str) -> Result<(), RtnlError>;
    /// The interface index of `name`, None when absent.
    fn link_index(&self, name: &str) -> Result<Option<u32>, RtnlError>;
    /// Adds one IPv4 route exactly as projected (table, type unicast,
    /// priority, on-link or via gateway on the named device); EEXIST is an
    /// error.
    fn add_route(&self, route: &ProjectedRoute) -> Result<(), RtnlError>;
    /// The policy-semantic projection of the current network namespace:
    /// every IPv4 route in every table except local (255) — destination,
    /// table, type, priority, next hop (gateway + device name, or on-link
    /// device name) — and every IPv6 address and route.
    ///
    /// IPv6 entries are text: addresses `ADDR/LEN dev NAME`, routes
    /// `DST/LEN [via GATEWAY] dev NAME`, with ` table N` appended outside
    /// the main table and ` type N` for a type other than unicast, so the
    /// kernel's local-table twins stay distinct; a route without an output
    /// device reads `multipath` or `nodev` in place of `dev NAME`.
    fn observe(&self) -> Result<PolicyProjection, RtnlError>;
    /// Creates the veth pair `name` / `peer_name` (RTM_NEWLINK,
    /// `NLM_F_CREATE | NLM_F_EXCL`: an existing `name` is EEXIST), the peer
    /// directly in the network namespace `peer_namespace` refers to, then
    /// reads the new link back by name and returns its creation record
    /// (spec 3.7 "Exact cleanup"). Both ends stay down. An error after the
    /// kernel's ACK (the read-back) leaves the pair created, without a
    /// record.
    fn create_veth(
        &self,
        name: &str,
        peer_name: &str,
        peer_namespace: BorrowedFd<'_>,
    ) -> Result<LinkRecord, RtnlError>;
    /// The current rtnetlink shape of the link `name`, None when absent.
    /// `kind` is empty only when the link has no `IFLA_LINKINFO`; a link
    /// without `IFLA_ADDRESS` (or one that is not 6 bytes) or `IFLA_MTU` is
    /// [`RtnlError::Unexpected`].
    fn link_record(&self, name: &str) -> Result<Option<LinkRecord>, RtnlError>;
    /// Deletes the link `record` describes (RTM_DELLINK by `record.index`),
    /// only when the current shape of `record.name`, read immediately
    /// before, equals `record` in every field; otherwise, absent included,
    /// [`RtnlError::LinkShapeChanged`] and nothing is deleted (spec 3.7
    /// "Exact cleanup").
    fn delete_link(&self, record: &LinkRecord) -> Result<(), RtnlError>;
    /// Adds `address/prefix_len` to `device` (RTM_NEWADDR with `IFA_LOCAL`
    /// and `IFA_ADDRESS`, scope universe, `NLM_F_CREATE | NLM_F_EXCL`: an
    /// existing address is EEXIST).
    fn add_address(&self, device: &str, address: Ipv4Addr, prefix_len: u8)
        -> Result<(), RtnlError>;
    /// Deletes the route [`RouteSys::add_route`] installs for `route`
    /// (RTM_DELROUTE with the same message); an absent route is ESRCH.
    fn delete_route(&self, route: &ProjectedRoute) -> Result<(), RtnlError>;
    /// Every link of the namespace, by interface index.
    fn link_names(&self) -> Result<BTreeMap<u32, String>, RtnlError>;
}

/// Why an rtnetlink effect failed: one variant per step.
#[derive(Debug, thiserror::Error)]
pub enum RtnlError {
    #[error("opening a NETLINK_ROUTE socket")]
    Socket {
        #[source]
        source: io::Error,
    },
    #[error("binding the NETLINK_ROUTE socket")]
    Bind {
        #[source]
        source: io::Error,
    },
    #[error("setting {option} on the NETLINK_ROUTE socket")]
    SocketOption {
        option: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("sending {request}")]
    Send {
        request: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("sending {request}: the kernel took {sent} of {length} bytes")]
    ShortSend {
        request: &'static str,
        sent: usize,
        length: usize,
    },
    #[error("receiving the reply to {request}")]
    Receive {
        request: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("the reply to {request} is a {length}-byte datagram, larger than the {capacity}-byte buffer")]
    Truncated {
        request: &'static str,
        length: usize,
        capacity: usize,
    },
    #[error("the reply to {request} came from {sender}, not from the kernel")]
    Sender {
        request: &'static str,
        sender: String,
    },
    #[error("decoding the reply to {request}")]
    Decode {
        request: &'static str,
        #[source]
        source: DecodeError,
    },
    #[error("the reply to {request} has sequence number {got} and port {port}, expected sequence number {expected} and port {own_port}")]
    Sequence {
        request: &'static str,
        expected: u32,
        got: u32,
        own_port: u32,
        port: u32,
    },
    #[error("the kernel refused {request}: {}{}", io::Error::from_raw_os_error(*errno), message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        request: &'static str,
        /// The positive errno of the kernel's negative NLMSG_ERROR code.
        errno: i32,
        /// The kernel's extended ACK text, when it sent one.
        message: Option<String>,
    },
    #[error("the dump {request} was interrupted by a concurrent change (NLM_F_DUMP_INTR)")]
    DumpInterrupted { request: &'static str },
    #[error("the reply to {request} exceeds its bound: {messages} messages, {bytes} bytes")]
    TooLarge {
        request: &'static str,
        messages: usize,
        bytes: usize,
    },
    #[error("unexpected reply to {request}: {detail}")]
    Unexpected {
        request: &'static str,
        detail: String,
    },
    #[error("no network device named {name:?}")]
    UnknownDevice { name: String },
    #[error("the IPv4 address {address}/{prefix_len} has a prefix length above 32")]
    PrefixLength { address: Ipv4Addr, prefix_len: u8 },
    /// Boxed: two records would make every `Result` of this module large.
    #[error("refusing to delete the link {link:?}: its creation record is {expected}, but it is now {now}",
        link = expected.name,
        now = found.as_deref().map_or_else(|| "absent".to_owned(), ToString::to_string))]
    LinkShapeChanged {
        expected: Box<LinkRecord>,
        found: Option<Box<LinkRecord>>,
    },
    #[error("the reply to {request} names interface index {index}, absent from the link dump")]
    UnknownIndex { request: &'static str, index: u32 },
    #[error("the route {destination} cannot be projected: {detail}")]
    UnsupportedRoute {
        destination: Ipv4Prefix,
        detail: String,
    },
}

/// The real [`RouteSys`]: a blocking `NETLINK_ROUTE` socket per call, in the
/// network namespace of the calling thread.
///
/// [`RouteSys::add_route`] and [`RouteSys::delete_route`] refuse, before
/// sending anything, a route in table 0 or 255 or of a type other than
/// unicast ([`RtnlError::UnsupportedRoute`]), and a device that does not
/// exist ([`RtnlError::UnknownDevice`]); [`RouteSys::add_address`] refuses
/// a prefix length above 32 ([`RtnlError::PrefixLength`]) and an unknown
/// device the same way.
#[derive(Debug, Clone, Copy, Default)]
pub struct NetlinkRoutes;

impl RouteSys for NetlinkRoutes {
    fn set_link_up(&self, name: &str) -> Result<(), RtnlError> {
        set_link_flags(name, LinkFlags::Up)
    }

    fn set_link_down(&self, name: &str) -> Result<(), RtnlError> {
        set_link_flags(name, LinkFlags::empty())
    }

    fn link_index(&self, name: &str) -> Result<Option<u32>, RtnlError> {
        Channel::open()?.link_index(name)
    }

    fn add_route(&self, route: &ProjectedRoute) -> Result<(), RtnlError> {
        let mut channel = Channel::open()?;
        let message = route_message(&mut channel, route)?;
        let replies = channel.acked(
            REQUEST_NEW_ROUTE,
            RouteNetlinkMessage::NewRoute(message),
            NLM_F_CREATE | NLM_F_EXCL,
        )?;
        expect_no_replies(REQUEST_NEW_ROUTE, &replies)
    }

    fn create_veth(
        &self,
        name: &str,
        peer_name: &str,
        peer_namespace: BorrowedFd<'_>,
    ) -> Result<LinkRecord, RtnlError> {
        let mut peer = LinkMessage::default();
        peer.attributes
            .push(LinkAttribute::IfName(peer_name.to_owned()));
        // IFLA_NET_NS_FD inside the peer's info: the kernel creates the
        // peer directly in that namespace. The descriptor is borrowed for
        // this call, which is the only time the kernel reads it.
        peer.attributes
            .push(LinkAttribute::NetNsFd(peer_namespace.as_raw_fd()));
        let mut message = LinkMessage::default();
        message
            .attributes
            .push(LinkAttribute::IfName(name.to_owned()));
        message.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        let mut channel = Channel::open()?;
        let replies = channel.acked(
            REQUEST_NEW_VETH,
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
        )?;
        expect_no_replies(REQUEST_NEW_VETH, &replies)?;
        // No other thread changes links in this namespace (spec 3.7), so
        // the link found by this name is the one just created.
        let record = channel
            .link_record(name)?
            .ok_or_else(|| RtnlError::Unexpected {
                request: REQUEST_GET_LINK_RECORD,
                detail: format!("the veth {name:?} is absent right after its creation"),
            })?;
        if record.kind != VETH_KIND {
            return Err(RtnlError::Unexpected {
                request: REQUEST_GET_LINK_RECORD,
                detail: format!(
                    "the link {name:?} just created as a veth has kind {:?}",
                    record.kind
                ),
            });
        }
        Ok(record)
    }

    fn link_record(&self, name: &str) -> Result<Option<LinkRecord>, RtnlError> {
        Channel::open()?.link_record(name)
    }

    fn delete_link(&self, record: &LinkRecord) -> Result<(), RtnlError> {
        let mut channel = Channel::open()?;
        // spec 3.7 "Exact cleanup": compared immediately before deleting,
        // on the socket that deletes.
        let found = channel.link_record(&record.name)?;
        check_link_shape(record, found)?;
        let mut message = LinkMessage::default();
        message.header.index = record.index;
        let replies = channel.acked(REQUEST_DEL_LINK, RouteNetlinkMessage::DelLink(message), 0)?;
        expect_no_replies(REQUEST_DEL_LINK, &replies)
    }

    fn add_address(
        &self,
        device: &str,
        address: Ipv4Addr,
        prefix_len: u8,
    ) -> Result<(), RtnlError> {
        check_prefix_len(address, prefix_len)?;
        let mut channel = Channel::open()?;
        let index = channel.device_index(device)?;
        let mut message = AddressMessage::default();
        message.header.family = AddressFamily::Inet;
        message.header.prefix_len = prefix_len;
        message.header.scope = AddressScope::Universe;
        message.header.index = index;
        message
            .attributes
            .push(AddressAttribute::Local(IpAddr::V4(address)));
        message
            .attributes
            .push(AddressAttribute::Address(IpAddr::V4(address)));
        let replies = channel.acked(
            REQUEST_NEW_ADDRESS,
            RouteNetlinkMessage::NewAddress(message),
            NLM_F_CREATE | NLM_F_EXCL,
        )?;
        expect_no_replies(REQUEST_NEW_ADDRESS, &replies)
    }

    fn delete_route(&self, route: &ProjectedRoute) -> Result<(), RtnlError> {
        let mut channel = Channel::open()?;
        // The very message add_route sends: the kernel deletes only the
        // route matching its table, type, protocol, scope, priority and
        // next hop.
        let message = route_message(&mut channel, route)?;
        let replies =
            channel.acked(REQUEST_DEL_ROUTE, RouteNetlinkMessage::DelRoute(message), 0)?;
        expect_no_replies(REQUEST_DEL_ROUTE, &replies)
    }

    fn link_names(&self) -> Result<BTreeMap<u32, String>, RtnlError> {
        Channel::open()?.link_names()
    }

    fn observe(&self) -> Result<PolicyProjection, RtnlError> {
        let mut channel = Channel::open()?;
        let links = channel.link_names()?;

        let mut ipv4_routes = Vec::new();
        let request = route_dump(AddressFamily::Inet);
        for reply in channel.dump(REQUEST_DUMP_IPV4_ROUTES, request)? {
            let route = expect_route(REQUEST_DUMP_IPV4_ROUTES, reply)?;
            if let Some(projected) = project_ipv4_route(&route, &links)? {
                ipv4_routes.push(projected);
            }
        }

        let mut ipv6_addresses = Vec::new();
        let mut request = AddressMessage::default();
        request.header.family = AddressFamily::Inet6;
        let request = RouteNetlinkMessage::GetAddress(request);
        for reply in channel.dump(REQUEST_DUMP_IPV6_ADDRESSES, request)? {
            let RouteNetlinkMessage::NewAddress(address) = reply else {
                return Err(unexpected_message(REQUEST_DUMP_IPV6_ADDRESSES, &reply));
            };
            if let Some(text) = describe_ipv6_address(&address, &links)? {
                ipv6_addresses.push(text);
            }
        }

        let mut ipv6_routes = Vec::new();
        let request = route_dump(AddressFamily::Inet6);
        for reply in channel.dump(REQUEST_DUMP_IPV6_ROUTES, request)? {
            let route = expect_route(REQUEST_DUMP_IPV6_ROUTES, reply)?;
            if let Some(text) = describe_ipv6_route(&route, &links)? {
                ipv6_routes.push(text);
            }
        }

        Ok(PolicyProjection::new(
            ipv4_routes,
            ipv6_addresses,
            ipv6_routes,
        ))
    }
}

/// One bound `NETLINK_ROUTE` socket and its sequence numbers.
struct Channel {
    socket: Socket,
    port: u32,
    sequence: u32,
}

impl Channel {
    fn open() -> Result<Self, RtnlError> {
        let mut socket =
            Socket::new(NETLINK_ROUTE).map_err(|source| RtnlError::Socket { source })?;
        let address = socket
            .bind_auto()
            .map_err(|source| RtnlError::Bind { source })?;
        let option = |option: &'static str| {
            move |source: io::Error| RtnlError::SocketOption { option, source }
        };
        socket
            .set_netlink_get_strict_chk(true)
            .map_err(option("NETLINK_GET_STRICT_CHK"))?;
        socket
            .set_cap_ack(true)
            .map_err(option("NETLINK_CAP_ACK"))?;
        socket
            .set_ext_ack(true)
            .map_err(option("NETLINK_EXT_ACK"))?;
        set_socket_timeout(&socket, Timeout::Recv, Some(RECEIVE_TIMEOUT))
            .map_err(|errno| option("SO_RCVTIMEO")(io::Error::from(errno)))?;
        Ok(Self {
            socket,
            port: address.port_number(),
            sequence: 0,
        })
    }

    /// The link `name`: a single RTM_GETLINK by name, ENODEV meaning
    /// absent. The kernel also resolves alternative names; a link whose name
    /// differs from `name` is refused, not taken.
    fn link_message(
        &mut self,
        request: &'static str,
        name: &str,
    ) -> Result<Option<LinkMessage>, RtnlError> {
        let mut message = LinkMessage::default();
        message
            .attributes
            .push(LinkAttribute::IfName(name.to_owned()));
        let replies = match self.acked(request, RouteNetlinkMessage::GetLink(message), 0) {
            Ok(replies) => replies,
            Err(RtnlError::Kernel { errno, .. })
                if errno == rustix::io::Errno::NODEV.raw_os_error() =>
            {
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        let [reply] = <[RouteNetlinkMessage; 1]>::try_from(replies).map_err(|replies| {
            RtnlError::Unexpected {
                request,
                detail: format!("{} replies, expected one link", replies.len()),
            }
        })?;
        let RouteNetlinkMessage::NewLink(link) = reply else {
            return Err(unexpected_message(request, &reply));
        };
        let reported = link_name(request, &link)?;
        if reported != name {
            return Err(RtnlError::Unexpected {
                request,
                detail: format!("asked for link {name:?}, got {reported:?}"),
            });
        }
        Ok(Some(link))
    }

    /// The index of the link `name`, None when absent.
    fn link_index(&mut self, name: &str) -> Result<Option<u32>, RtnlError> {
        Ok(self
            .link_message(REQUEST_GET_LINK, name)?
            .map(|link| link.header.index))
    }

    /// The index of the device `name`; absent is [`RtnlError::UnknownDevice`].
    fn device_index(&mut self, name: &str) -> Result<u32, RtnlError> {
        self.link_index(name)?
            .ok_or_else(|| RtnlError::UnknownDevice {
                name: name.to_owned(),
            })
    }

    /// The current shape of the link `name`, None when absent.
    fn link_record(&mut self, name: &str) -> Result<Option<LinkRecord>, RtnlError> {
        self.link_message(REQUEST_GET_LINK_RECORD, name)?
            .map(|link| link_record_of(REQUEST_GET_LINK_RECORD, &link))
            .transpose()
    }

    /// Every link of the namespace, by index.
    fn link_names(&mut self) -> Result<BTreeMap<u32, String>, RtnlError> {
        let request = RouteNetlinkMessage::GetLink(LinkMessage::default());
        let mut names = BTreeMap::new();
        for reply in self.dump(REQUEST_DUMP_LINKS, request)? {
            let RouteNetlinkMessage::NewLink(link) = reply else {
                return Err(unexpected_message(REQUEST_DUMP_LINKS, &reply));
            };
            let name = link_name(REQUEST_DUMP_LINKS, &link)?.to_owned();
            if names.insert(link.header.index, name).is_some() {
                return Err(RtnlError::Unexpected {
                    request: REQUEST_DUMP_LINKS,
                    detail: format!("interface index {} listed twice", link.header.index),
                });
            }
        }
        Ok(names)
    }

    /// A change or single get: `NLM_F_REQUEST | NLM_F_ACK | extra_flags`,
    /// complete on the ACK. Returns the messages before the ACK.
    fn acked(
        &mut self,
        request: &'static str,
        message: RouteNetlinkMessage,
        extra_flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, RtnlError> {
        let sequence = self.send(request, message, NLM_F_REQUEST | NLM_F_ACK | extra_flags)?;
        self.collect(request, sequence, Reply::Ack)
    }

    /// A dump: `NLM_F_REQUEST | NLM_F_DUMP`, complete on NLMSG_DONE.
    fn dump(
        &mut self,
        request: &'static str,
        message: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, RtnlError> {
        let sequence = self.send(request, message, NLM_F_REQUEST | NLM_F_DUMP)?;
        self.collect(request, sequence, Reply::Dump)
    }

    fn send(
        &mut self,
        request: &'static str,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<u32, RtnlError> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(message));
        packet.finalize();
        let mut bytes = vec![0; packet.buffer_len()];
        packet.serialize(&mut bytes);
        let sent = self
            .socket
            .send_to(&bytes, &SocketAddr::new(0, 0), 0)
            .map_err(|source| RtnlError::Send { request, source })?;
        if sent != bytes.len() {
            return Err(RtnlError::ShortSend {
                request,
                sent,
                length: bytes.len(),
            });
        }
        Ok(self.sequence)
    }

    /// Reads replies to `sequence` until the terminal message of `reply`.
    fn collect(
        &mut self,
        request: &'static str,
        sequence: u32,
        reply: Reply,
    ) -> Result<Vec<RouteNetlinkMessage>, RtnlError> {
        let (messages_max, bytes_max) = match reply {
            Reply::Ack => (ACK_MESSAGES_MAX, ACK_MESSAGES_MAX * RECEIVE_BYTES),
            Reply::Dump => (DUMP_MESSAGES_MAX, DUMP_BYTES_MAX),
        };
        let mut buffer = vec![0u8; RECEIVE_BYTES];
        let mut replies = Vec::new();
        let mut messages = 0usize;
        let mut bytes = 0usize;
        // Bounded: every datagram adds to `bytes` and every message to
        // `messages`, and both are checked against their maximum.
        loop {
            let length = self.receive(request, &mut buffer)?;
            bytes = bytes.saturating_add(length);
            if bytes > bytes_max {
                return Err(RtnlError::TooLarge {
                    request,
                    messages,
                    bytes,
                });
            }
            let mut datagram = buffer.get(..length).unwrap_or_default();
            while !datagram.is_empty() {
                messages += 1;
                if messages > messages_max {
                    return Err(RtnlError::TooLarge {
                        request,
                        messages,
                        bytes,
                    });
                }
                let decode = |source| RtnlError::Decode { request, source };
                let frame = NetlinkBuffer::new_checked(datagram).map_err(decode)?;
                let frame_length = usize::try_from(frame.length()).unwrap_or(usize::MAX);
                let (current, rest) = datagram.split_at(frame_length.min(datagram.len()));
                datagram = rest.get(padding(frame_length)..).unwrap_or_default();
                let message =
                    NetlinkMessage::<RouteNetlinkMessage>::deserialize(current).map_err(decode)?;
                let header = message.header;
                if header.sequence_number != sequence || header.port_number != self.port {
                    return Err(RtnlError::Sequence {
                        request,
                        expected: sequence,
                        got: header.sequence_number,
                        own_port: self.port,
                        port: header.port_number,
                    });
                }
                if reply == Reply::Dump && header.flags & NLM_F_DUMP_INTR != 0 {
                    return Err(RtnlError::DumpInterrupted { request });
                }
                let finished = match message.payload {
                    NetlinkPayload::InnerMessage(inner) => {
                        replies.push(inner);
                        false
                    }
                    NetlinkPayload::Noop => false,
                    NetlinkPayload::Error(error) => match error.code {
                        Some(code) => {
                            return Err(RtnlError::Kernel {
                                request,
                                errno: code.get().saturating_neg(),
                                message: error_message_text(&error, header.flags),
                            });
                        }
                        None if reply == Reply::Ack => true,
                        None => {
                            return Err(RtnlError::Unexpected {
                                request,
                                detail: "an ACK inside a dump".to_owned(),
                            });
                        }
                    },
                    NetlinkPayload::Done(done) if reply == Reply::Dump => {
                        if done.code != 0 {
                            return Err(RtnlError::Kernel {
                                request,
                                errno: done.code.saturating_neg(),
                                message: attribute_text(&done.extended_ack),
                            });
                        }
                        true
                    }
                    other => {
                        return Err(RtnlError::Unexpected {
                            request,
                            detail: format!("netlink message type {}", payload_name(&other)),
                        });
                    }
                };
                if finished {
                    if !datagram.is_empty() {
                        return Err(RtnlError::Unexpected {
                            request,
                            detail: format!("{} bytes after the final message", datagram.len()),
                        });
                    }
                    return Ok(replies);
                }
            }
        }
    }

    /// One datagram from the kernel into `buffer`; its length.
    fn receive(&self, request: &'static str, buffer: &mut [u8]) -> Result<usize, RtnlError> {
        let mut interrupts = 0;
        let (length, sender) = loop {
            match rustix::net::recvfrom(&self.socket, &mut *buffer, RecvFlags::TRUNC) {
                Ok((_, length, sender)) => break (length, sender),
                Err(rustix::io::Errno::INTR) if interrupts < RECEIVE_INTERRUPTS_MAX => {
                    interrupts += 1;
                }
                Err(errno) => {
                    return Err(RtnlError::Receive {
                        request,
                        source: io::Error::from(errno),
                    });
                }
            }
        };
        if length > buffer.len() {
            return Err(RtnlError::Truncated {
                request,
                length,
                capacity: buffer.len(),
            });
        }
        let sender = sender.map(SocketAddrNetlink::try_from);
        match sender {
            Some(Ok(address)) if address.pid() == 0 => Ok(length),
            other => Err(RtnlError::Sender {
                request,
                sender: format!("{other:?}"),
            }),
        }
    }
}

/// What ends an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// NLMSG_ERROR with code 0.
    Ack,
    /// NLMSG_DONE with code 0.
    Dump,
}

/// Netlink messages are 4-byte aligned: the offset of the next one.
/// RTM_SETLINK of `name`'s up flag to the one in `flags`.
fn set_link_flags(name: &str, flags: LinkFlags) -> Result<(), RtnlError> {
    let mut channel = Channel::open()?;
    let index = channel.device_index(name)?;
    let mut message = LinkMessage::default();
    message.header.index = index;
    message.header.flags = flags;
    message.header.change_mask = LinkFlags::Up;
    let replies = channel.acked(REQUEST_SET_LINK, RouteNetlinkMessage::SetLink(message), 0)?;
    expect_no_replies(REQUEST_SET_LINK, &replies)
}

fn padding(length: usize) -> usize {
    length.next_multiple_of(4) - length
}

fn payload_name(payload: &NetlinkPayload<RouteNetlinkMessage>) -> &'static str {
    match payload {
        NetlinkPayload::Done(_) => "NLMSG_DONE",
        NetlinkPayload::Error(_) => "NLMSG_ERROR",
        NetlinkPayload::Noop => "NLMSG_NOOP",
        NetlinkPayload::Overrun(_) => "NLMSG_OVERRUN",
        NetlinkPayload::InnerMessage(_) => "rtnetlink",
        _ => "unknown",
    }
}

/// The extended ACK text of an NLMSG_ERROR, when the kernel sent one.
fn error_message_text(error: &ErrorMessage, flags: u16) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    // The payload echoes the request: its header only when capped
    // (NETLINK_CAP_ACK), else the whole request. The attributes follow.
    let echoed = if flags & NLM_F_CAPPED != 0 {
        NETLINK_HEADER_BYTES
    } else {
        let length = NetlinkBuffer::new_checked(error.header.as_slice())
            .ok()?
            .length();
        let length = usize::try_from(length).ok()?;
        length + padding(length)
    };
    attribute_text(error.header.get(echoed..)?)
}

/// `NLMSGERR_ATTR_MSG` among extended ACK attributes.
fn attribute_text(attributes: &[u8]) -> Option<String> {
    NlasIterator::new(attributes)
        .take(EXTENDED_ACK_ATTRIBUTES_MAX)
        .map_while(Result::ok)
        .find(|attribute| attribute.kind() == NLMSGERR_ATTR_MSG)
        .and_then(|attribute| parse_string(attribute.value()).ok())
}

/// The RTM_NEWROUTE / RTM_DELROUTE message for `route`, its device
/// resolved on `channel`. Refuses, before anything is sent, a route in
/// table 0 or 255 or of a type other than unicast
/// ([`RtnlError::UnsupportedRoute`]), and a device that does not exist
/// ([`RtnlError::UnknownDevice`]).
fn route_message(channel: &mut Channel, route: &ProjectedRoute) -> Result<RouteMessage, RtnlError> {
    let unsupported = |detail: String| RtnlError::UnsupportedRoute {
        destination: route.destination,
        detail,
    };
    if route.table == 0 || route.table == RT_TABLE_LOCAL {
        return Err(unsupported(format!(
            "table {} is not a policy table",
            route.table
        )));
    }
    if route.route_type != RTN_UNICAST {
        return Err(unsupported(format!(
            "type {} is not unicast",
            route.route_type
        )));
    }
    let (device, gateway, scope) = match &route.next_hop {
        RouteNextHop::OnLink { device } => (device, None, RouteScope::Link),
        RouteNextHop::Gateway { gateway, device } => (device, Some(*gateway), RouteScope::Universe),
    };
    let index = channel.device_index(device)?;
    let [a, b, c, d] = route.destination.network();
    let mut message = RouteMessage::default();
    message.header = RouteHeader {
        address_family: AddressFamily::Inet,
        destination_prefix_length: route.destination.prefix_len(),
        source_prefix_length: 0,
        tos: 0,
        // A table above 255 goes in RTA_TABLE, as iproute2 does.
        table: u8::try_from(route.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC),
        // RTPROT_BOOT is what `ip route add` sets, and the runsc route
        // import was measured with it (docs/network-research.md §3).
        // The projection does not read it.
        protocol: RouteProtocol::Boot,
        scope,
        kind: RouteType::Unicast,
        flags: RouteFlags::empty(),
    };
    let attributes = &mut message.attributes;
    attributes.push(RouteAttribute::Destination(RouteAddress::Inet(
        Ipv4Addr::new(a, b, c, d),
    )));
    if route.table > u32::from(u8::MAX) {
        attributes.push(RouteAttribute::Table(route.table));
    }
    if let Some(gateway) = gateway {
        attributes.push(RouteAttribute::Gateway(RouteAddress::Inet(gateway)));
    }
    attributes.push(RouteAttribute::Oif(index));
    attributes.push(RouteAttribute::Priority(route.priority));
    Ok(message)
}

/// An IPv4 prefix length is at most 32.
fn check_prefix_len(address: Ipv4Addr, prefix_len: u8) -> Result<(), RtnlError> {
    if prefix_len > 32 {
        return Err(RtnlError::PrefixLength {
            address,
            prefix_len,
        });
    }
    Ok(())
}

/// spec 3.7 "Exact cleanup": the link may be deleted only when its current
/// shape `found` is its creation record `expected`, field for field.
fn check_link_shape(expected: &LinkRecord, found: Option<LinkRecord>) -> Result<(), RtnlError> {
    if found.as_ref() == Some(expected) {
        return Ok(());
    }
    Err(RtnlError::LinkShapeChanged {
        expected: Box::new(expected.clone()),
        found: found.map(Box::new),
    })
}

/// The [`LinkRecord`] of a link as the kernel reports it.
fn link_record_of(request: &'static str, link: &LinkMessage) -> Result<LinkRecord, RtnlError> {
    let name = link_name(request, link)?;
    let missing = |what: &str| RtnlError::Unexpected {
        request,
        detail: format!("link {name:?} (index {}) has no {what}", link.header.index),
    };
    let mut info = None;
    let mut mac = None;
    let mut mtu = None;
    let mut peer_index = None;
    let mut peer_namespace_id = None;
    for attribute in &link.attributes {
        match attribute {
            LinkAttribute::LinkInfo(infos) => info = Some(infos),
            LinkAttribute::Address(address) => mac = Some(address),
            LinkAttribute::Mtu(value) => mtu = Some(*value),
            LinkAttribute::Link(index) => peer_index = Some(*index),
            LinkAttribute::LinkNetNsId(id) => peer_namespace_id = Some(*id),
            _ => {}
        }
    }
    let kind = match info {
        None => String::new(),
        Some(infos) => infos
            .iter()
            .find_map(|info| match info {
                LinkInfo::Kind(kind) => Some(kind.to_string()),
                _ => None,
            })
            .ok_or_else(|| missing("IFLA_INFO_KIND in its IFLA_LINKINFO"))?,
    };
    let mac = mac.ok_or_else(|| missing("IFLA_ADDRESS"))?;
    let mac = <[u8; 6]>::try_from(mac.as_slice()).map_err(|_| RtnlError::Unexpected {
        request,
        detail: format!(
            "link {name:?} (index {}) has a {}-byte IFLA_ADDRESS, expected 6",
            link.header.index,
            mac.len()
        ),
    })?;
    Ok(LinkRecord {
        version: LINK_RECORD_VERSION,
        index: link.header.index,
        name: name.to_owned(),
        kind,
        mac,
        mtu: mtu.ok_or_else(|| missing("IFLA_MTU"))?,
        peer_index,
        peer_namespace_id,
    })
}

fn route_dump(family: AddressFamily) -> RouteNetlinkMessage {
    let mut message = RouteMessage::default();
    message.header.address_family = family;
    RouteNetlinkMessage::GetRoute(message)
}

fn expect_no_replies(
    request: &'static str,
    replies: &[RouteNetlinkMessage],
) -> Result<(), RtnlError> {
    match replies.first() {
        None => Ok(()),
        Some(reply) => Err(unexpected_message(request, reply)),
    }
}

fn expect_route(
    request: &'static str,
    reply: RouteNetlinkMessage,
) -> Result<RouteMessage, RtnlError> {
    match reply {
        RouteNetlinkMessage::NewRoute(route) => Ok(route),
        other => Err(unexpected_message(request, &other)),
    }
}

fn unexpected_message(request: &'static str, message: &RouteNetlinkMessage) -> RtnlError {
    RtnlError::Unexpected {
        request,
        detail: format!("rtnetlink message type {}", message.message_type()),
    }
}

fn link_name<'a>(request: &'static str, link: &'a LinkMessage) -> Result<&'a str, RtnlError> {
    link.attributes
        .iter()
        .find_map(|attribute| match attribute {
            LinkAttribute::IfName(name) => Some(name.as_str()),
            _ => None,
        })
        .ok_or_else(|| RtnlError::Unexpected {
            request,
            detail: format!("link {} has no IFLA_IFNAME", link.header.index),
        })
}

fn device_name(
    request: &'static str,
    links: &BTreeMap<u32, String>,
    index: u32,
) -> Result<String, RtnlError> {
    links
        .get(&index)
        .cloned()
        .ok_or(RtnlError::UnknownIndex { request, index })
}

/// The table of a dumped route: RTA_TABLE, else the header's 8-bit table.
fn route_table(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|attribute| match attribute {
            RouteAttribute::Table(table) => Some(*table),
            _ => None,
        })
        .unwrap_or(u32::from(route.header.table))
}

/// One dumped IPv4 route as projected; None for the local table and for
/// cloned (cache) entries.
fn project_ipv4_route(
    route: &RouteMessage,
    links: &BTreeMap<u32, String>,
) -> Result<Option<ProjectedRoute>, RtnlError> {
    const REQUEST: &str = REQUEST_DUMP_IPV4_ROUTES;
    let header = &route.header;
    if header.address_family != AddressFamily::Inet {
        return Err(RtnlError::Unexpected {
            request: REQUEST,
            detail: format!("address family {:?}", header.address_family),
        });
    }
    let table = route_table(route);
    if table == RT_TABLE_LOCAL || header.flags.contains(RouteFlags::Cloned) {
        return Ok(None);
    }
    let length = header.destination_prefix_length;
    if length > 32 {
        return Err(RtnlError::Unexpected {
            request: REQUEST,
            detail: format!("IPv4 prefix length {length}"),
        });
    }
    let mut destination = Ipv4Addr::UNSPECIFIED;
    let mut device = None;
    let mut gateway = None;
    let mut priority = 0;
    let mut refusals = Vec::new();
    if header.tos != 0 {
        refusals.push(format!("TOS selector {}", header.tos));
    }
    if header.source_prefix_length != 0 {
        refusals.push(format!("source selector /{}", header.source_prefix_length));
    }
    for attribute in &route.attributes {
        match attribute {
            RouteAttribute::Destination(RouteAddress::Inet(address)) => destination = *address,
            RouteAttribute::Gateway(RouteAddress::Inet(address)) => gateway = Some(*address),
            RouteAttribute::Oif(index) => device = Some(*index),
            RouteAttribute::Priority(value) => priority = *value,
            // Read by route_table.
            RouteAttribute::Table(_) => {}
            // Presentation, counters and cache state: not policy semantics.
            RouteAttribute::PrefSource(_)
            | RouteAttribute::CacheInfo(_)
            | RouteAttribute::Metrics(_) => {}
            RouteAttribute::MultiPath(_) => refusals.push("multipath".to_owned()),
            RouteAttribute::NhId(id) => refusals.push(format!("next-hop object {id}")),
            RouteAttribute::Via(_) => refusals.push("RTA_VIA next hop".to_owned()),
            RouteAttribute::Encap(_) | RouteAttribute::EncapType(_) => {
                refusals.push("lightweight-tunnel encapsulation".to_owned());
            }
            other => refusals.push(format!("attribute type {}", other.kind())),
        }
    }
    let prefix = Ipv4Prefix::new(destination.octets(), length);
    if prefix.network() != destination.octets() {
        return Err(RtnlError::Unexpected {
            request: REQUEST,
            detail: format!("destination {destination}/{length} has host bits set"),
        });
    }
    let unsupported = |detail: String| RtnlError::UnsupportedRoute {
        destination: prefix,
        detail: format!("table {table}, type {}: {detail}", u8::from(header.kind)),
    };
    if !refusals.is_empty() {
        return Err(unsupported(refusals.join(", ")));
    }
    let Some(index) = device else {
        return Err(unsupported("no output device".to_owned()));
    };
    let device = device_name(REQUEST, links, index)?;
    let next_hop = match gateway {
        Some(gateway) => RouteNextHop::Gateway { gateway, device },
        None => RouteNextHop::OnLink { device },
    };
    Ok(Some(ProjectedRoute {
        destination: prefix,
        table,
        route_type: header.kind.into(),
        priority,
        next_hop,
    }))
}

/// One dumped IPv6 address as `ADDR/LEN dev NAME`; None for another
/// family (see [`is_other_family`]).
fn describe_ipv6_address(
    address: &AddressMessage,
    links: &BTreeMap<u32, String>,
) -> Result<Option<String>, RtnlError> {
    const REQUEST: &str = REQUEST_DUMP_IPV6_ADDRESSES;
    if is_other_family(address.header.family) {
        return Ok(None);
    }
    let mut local = None;
    let mut peer = None;
    for attribute in &address.attributes {
        match attribute {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => peer = Some(*ip),
            _ => {}
        }
    }
    // IFA_LOCAL is the own address when both are present (point-to-point).
    let Some(IpAddr::V6(ip)) = local.or(peer) else {
        return Err(RtnlError::Unexpected {
            request: REQUEST,
            detail: format!(
                "address on interface {} has no IPv6 address",
                address.header.index
            ),
        });
    };
    let device = device_name(REQUEST, links, address.header.index)?;
    Ok(Some(format!(
        "{ip}/{} dev {device}",
        address.header.prefix_len
    )))
}

/// One dumped IPv6 route as text (see [`RouteSys::observe`]); None for
/// cloned (cache) entries and for another family (see [`is_other_family`]).
fn describe_ipv6_route(
    route: &RouteMessage,
    links: &BTreeMap<u32, String>,
) -> Result<Option<String>, RtnlError> {
    const REQUEST: &str = REQUEST_DUMP_IPV6_ROUTES;
    if is_other_family(route.header.address_family)
        || route.header.flags.contains(RouteFlags::Cloned)
    {
        return Ok(None);
    }
    let mut destination = Ipv6Addr::UNSPECIFIED;
    let mut gateway = None;
    let mut device = None;
    let mut multipath = false;
    for attribute in &route.attributes {
        match attribute {
            RouteAttribute::Destination(RouteAddress::Inet6(address)) => destination = *address,
            RouteAttribute::Gateway(RouteAddress::Inet6(address)) => gateway = Some(*address),
            RouteAttribute::Oif(index) => device = Some(*index),
            RouteAttribute::MultiPath(_) => multipath = true,
            _ => {}
        }
    }
    let mut text = format!("{destination}/{}", route.header.destination_prefix_length);
    if let Some(gateway) = gateway {
        text.push_str(&format!(" via {gateway}"));
    }
    match device {
        Some(index) => {
            text.push_str(" dev ");
            text.push_str(&device_name(REQUEST, links, index)?);
        }
        None if multipath => text.push_str(" multipath"),
        None => text.push_str(" nodev"),
    }
    let table = route_table(route);
    if table != RT_TABLE_MAIN {
        text.push_str(&format!(" table {table}"));
    }
    let kind = u8::from(route.header.kind);
    if kind != RTN_UNICAST {
        text.push_str(&format!(" type {kind}"));
    }
    Ok(Some(text))
}

/// Whether an entry of an IPv6 dump belongs to another family. A kernel
/// without IPv6 can answer an AF_INET6 dump with its all-families handler
/// (the PF_UNSPEC fallback in `rtnetlink_rcv_msg`); its IPv4 entries are
/// the IPv4 dump's business.
fn is_other_family(family: AddressFamily) -> bool {
    family != AddressFamily::Inet6
}

/// A route as the fake records it:
/// `DST/LEN [via GATEWAY] dev NAME table T type N priority P`.
fn describe_route(route: &ProjectedRoute) -> String {
    let next_hop = match &route.next_hop {
        RouteNextHop::OnLink { device } => format!("dev {device}"),
        RouteNextHop::Gateway { gateway, device } => format!("via {gateway} dev {device}"),
    };
    format!(
        "{} {next_hop} table {} type {} priority {}",
        route.destination, route.table, route.route_type, route.priority
    )
}

/// The recording fake [`RouteSys`] for tests of code that drives it.
///
/// Every call is recorded as a string, in order:
/// `set_link_up NAME`, `link_index NAME`,
/// `add_route DST/LEN [via GATEWAY] dev NAME table T type N priority P`,
/// `observe`, `create_veth NAME PEER`, `link_record NAME`,
/// `delete_link NAME index=I`, `add_address NAME ADDR/LEN`,
/// `delete_route DST/LEN [via GATEWAY] dev NAME table T type N priority P`,
/// `link_names`. A call whose record equals the one given to
/// [`RecordingRoutes::failing`] is recorded and then fails with
/// [`RtnlError::Kernel`] and that errno, changing nothing.
///
/// Links: those given to [`RecordingRoutes::with_link`] have an index and
/// no shape; those given to [`RecordingRoutes::with_record`] or created by
/// [`RouteSys::create_veth`] have a [`LinkRecord`], which takes precedence
/// for the same name. [`RouteSys::link_index`] and
/// [`RouteSys::link_names`] answer from both; [`RouteSys::link_record`]
/// from the records only. [`RouteSys::create_veth`] refuses an existing
/// name with EEXIST, else remembers and returns a record with the next
/// index after every known one, kind `veth`, [`RECORDING_VETH_MAC`],
/// [`RECORDING_VETH_MTU`], [`RECORDING_VETH_PEER_INDEX`] and
/// [`RECORDING_VETH_PEER_NAMESPACE_ID`]. [`RouteSys::delete_link`] compares
/// like the real one and forgets the record.
///
/// Routes: [`RouteSys::observe`] returns the projection given to
/// [`RecordingRoutes::observing`], or else the routes added and not deleted
/// so far, with no IPv6. [`RouteSys::delete_route`] of a route not added is
/// ESRCH. Devices are not checked and addresses are not remembered;
/// [`RouteSys::add_address`] refuses a prefix length above 32 like the
/// real one.
#[derive(Debug, Default)]
pub struct RecordingRoutes {
    state: Mutex<Recorded>,
    links: BTreeMap<String, u32>,
    observed: Option<PolicyProjection>,
    failing: Option<(String, i32)>,
}

#[derive(Debug, Default)]
struct Recorded {
    calls: Vec<String>,
    added: Vec<ProjectedRoute>,
    /// Links with a shape, by name.
    records: BTreeMap<String, LinkRecord>,
}

impl RecordingRoutes {
    /// A fake with no links, no primed projection and no failure.
    pub fn new() -> Self {
        Self::default()
    }

    /// `link_index(name)` answers `Some(index)`.
    pub fn with_link(mut self, name: &str, index: u32) -> Self {
        self.links.insert(name.to_owned(), index);
        self
    }

    /// The link `record.name` has the shape `record` (replacing any
    /// earlier one): primes a link, or simulates a changed shape.
    pub fn with_record(mut self, record: LinkRecord) -> Self {
        self.state
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .records
            .insert(record.name.clone(), record);
        self
    }

    /// `observe()` returns `projection`.
    pub fn observing(mut self, projection: PolicyProjection) -> Self {
        self.observed = Some(projection);
        self
    }

    /// The call recorded as `call` fails with `errno`.
    pub fn failing(mut self, call: &str, errno: i32) -> Self {
        self.failing = Some((call.to_owned(), errno));
        self
    }

    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `call`; the primed failure when it is this call.
    fn record(&self, request: &'static str, call: String) -> Result<(), RtnlError> {
        let failure = match &self.failing {
            Some((failing, errno)) if *failing == call => Some(*errno),
            _ => None,
        };
        self.state().calls.push(call);
        match failure {
            Some(errno) => Err(RtnlError::Kernel {
                request,
                errno,
                message: None,
            }),
            None => Ok(()),
        }
    }
}

impl RouteSys for RecordingRoutes {
    fn set_link_up(&self, name: &str) -> Result<(), RtnlError> {
        self.record(REQUEST_SET_LINK, format!("set_link_up {name}"))
    }

    fn set_link_down(&self, name: &str) -> Result<(), RtnlError> {
        self.record(REQUEST_SET_LINK, format!("set_link_down {name}"))
    }

    fn link_index(&self, name: &str) -> Result<Option<u32>, RtnlError> {
        self.record(REQUEST_GET_LINK, format!("link_index {name}"))?;
        let recorded = self.state().records.get(name).map(|record| record.index);
        Ok(recorded.or_else(|| self.links.get(name).copied()))
    }

    fn add_route(&self, route: &ProjectedRoute) -> Result<(), RtnlError> {
        self.record(
            REQUEST_NEW_ROUTE,
            format!("add_route {}", describe_route(route)),
        )?;
        self.state().added.push(route.clone());
        Ok(())
    }

    fn observe(&self) -> Result<PolicyProjection, RtnlError> {
        self.record(REQUEST_OBSERVE, "observe".to_owned())?;
        Ok(match &self.observed {
            Some(projection) => projection.clone(),
            None => PolicyProjection::new(self.state().added.clone(), Vec::new(), Vec::new()),
        })
    }

    fn create_veth(
        &self,
        name: &str,
        peer_name: &str,
        _peer_namespace: BorrowedFd<'_>,
    ) -> Result<LinkRecord, RtnlError> {
        self.record(REQUEST_NEW_VETH, format!("create_veth {name} {peer_name}"))?;
        let mut state = self.state();
        if state.records.contains_key(name) || self.links.contains_key(name) {
            return Err(RtnlError::Kernel {
                request: REQUEST_NEW_VETH,
                errno: rustix::io::Errno::EXIST.raw_os_error(),
                message: None,
            });
        }
        let last = self
            .links
            .values()
            .chain(state.records.values().map(|record| &record.index))
            .max()
            .copied()
            .unwrap_or(0);
        let record = LinkRecord {
            version: LINK_RECORD_VERSION,
            index: last.saturating_add(1),
            name: name.to_owned(),
            kind: VETH_KIND.to_owned(),
            mac: RECORDING_VETH_MAC,
            mtu: RECORDING_VETH_MTU,
            peer_index: Some(RECORDING_VETH_PEER_INDEX),
            peer_namespace_id: Some(RECORDING_VETH_PEER_NAMESPACE_ID),
        };
        state.records.insert(name.to_owned(), record.clone());
        Ok(record)
    }

    fn link_record(&self, name: &str) -> Result<Option<LinkRecord>, RtnlError> {
        self.record(REQUEST_GET_LINK_RECORD, format!("link_record {name}"))?;
        Ok(self.state().records.get(name).cloned())
    }

    fn delete_link(&self, record: &LinkRecord) -> Result<(), RtnlError> {
        self.record(
            REQUEST_DEL_LINK,
            format!("delete_link {} index={}", record.name, record.index),
        )?;
        let mut state = self.state();
        check_link_shape(record, state.records.get(&record.name).cloned())?;
        state.records.remove(&record.name);
        Ok(())
    }

    fn add_address(
        &self,
        device: &str,
        address: Ipv4Addr,
        prefix_len: u8,
    ) -> Result<(), RtnlError> {
        check_prefix_len(address, prefix_len)?;
        self.record(
            REQUEST_NEW_ADDRESS,
            format!("add_address {device} {address}/{prefix_len}"),
        )
    }

    fn delete_route(&self, route: &ProjectedRoute) -> Result<(), RtnlError> {
        self.record(
            REQUEST_DEL_ROUTE,
            format!("delete_route {}", describe_route(route)),
        )?;
        let mut state = self.state();
        let Some(position) = state.added.iter().position(|added| added == route) else {
            return Err(RtnlError::Kernel {
                request: REQUEST_DEL_ROUTE,
                errno: rustix::io::Errno::SRCH.raw_os_error(),
                message: None,
            });
        };
        state.added.remove(position);
        Ok(())
    }

    fn link_names(&self) -> Result<BTreeMap<u32, String>, RtnlError> {
        self.record(REQUEST_DUMP_LINKS, "link_names".to_owned())?;
        let state = self.state();
        let mut names: BTreeMap<u32, String> = self
            .links
            .iter()
            .filter(|(name, _)| !state.records.contains_key(*name))
            .map(|(name, index)| (*index, name.clone()))
            .collect();
        names.extend(
            state
                .records
                .values()
                .map(|record| (record.index, record.name.clone())),
        );
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_runtime::network::topology::{GATEWAY, TAP_DEVICE};

    fn on_link(prefix: Ipv4Prefix) -> ProjectedRoute {
        ProjectedRoute {
            destination: prefix,
            table: RT_TABLE_MAIN,
            route_type: RTN_UNICAST,
            priority: 0,
            next_hop: RouteNextHop::OnLink {
                device: TAP_DEVICE.to_owned(),
            },
        }
    }

    fn via_gateway(prefix: Ipv4Prefix) -> ProjectedRoute {
        ProjectedRoute {
            next_hop: RouteNextHop::Gateway {
                gateway: GATEWAY,
                device: TAP_DEVICE.to_owned(),
            },
            ..on_link(prefix)
        }
    }

    #[test]
    fn recording_routes_records_calls_in_order_and_observes_added_routes() {
        let deny = on_link(Ipv4Prefix::new([10, 0, 0, 0], 8));
        let allow = via_gateway(Ipv4Prefix::new([10, 99, 0, 5], 32));
        let fake = RecordingRoutes::new().with_link("tap0", 7);

        fake.set_link_up("lo").unwrap();
        assert_eq!(fake.link_index("tap0").unwrap(), Some(7));
        assert_eq!(fake.link_index("cnr0").unwrap(), None);
        fake.add_route(&deny).unwrap();
        fake.add_route(&allow).unwrap();
        let observed = fake.observe().unwrap();

        assert_eq!(
            fake.calls(),
            [
                "set_link_up lo",
                "link_index tap0",
                "link_index cnr0",
                "add_route 10.0.0.0/8 dev tap0 table 254 type 1 priority 0",
                "add_route 10.99.0.5/32 via 10.137.54.2 dev tap0 table 254 type 1 priority 0",
                "observe",
            ]
        );
        assert_eq!(
            observed,
            PolicyProjection::new(vec![allow, deny], Vec::new(), Vec::new())
        );
    }

    #[test]
    fn recording_routes_returns_the_primed_projection() {
        let primed = PolicyProjection::new(
            vec![on_link(Ipv4Prefix::new([192, 168, 0, 0], 16))],
            vec!["::1/128 dev lo".to_owned()],
            Vec::new(),
        );
        let fake = RecordingRoutes::new().observing(primed.clone());
        fake.add_route(&on_link(Ipv4Prefix::new([10, 0, 0, 0], 8)))
            .unwrap();
        assert_eq!(fake.observe().unwrap(), primed);
    }

    #[test]
    fn recording_routes_fails_the_primed_step_after_recording_it() {
        let eexist = rustix::io::Errno::EXIST.raw_os_error();
        let fake = RecordingRoutes::new().failing(
            "add_route 10.0.0.0/8 dev tap0 table 254 type 1 priority 0",
            eexist,
        );
        fake.set_link_up("tap0").unwrap();
        let error = fake
            .add_route(&on_link(Ipv4Prefix::new([10, 0, 0, 0], 8)))
            .unwrap_err();
        assert!(
            matches!(
                error,
                RtnlError::Kernel { request: REQUEST_NEW_ROUTE, errno, message: None } if errno == eexist
            ),
            "{error:?}"
        );
        assert_eq!(
            fake.calls(),
            [
                "set_link_up tap0",
                "add_route 10.0.0.0/8 dev tap0 table 254 type 1 priority 0",
            ]
        );
        // A failed addition is not observed.
        assert_eq!(
            fake.observe().unwrap(),
            PolicyProjection::new(Vec::new(), Vec::new(), Vec::new())
        );
    }

    /// A netlink attribute, padded.
    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let length = 4 + value.len();
        let mut bytes = u16::try_from(length).unwrap().to_ne_bytes().to_vec();
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(value);
        bytes.resize(length.next_multiple_of(4), 0);
        bytes
    }

    /// A `struct nlmsghdr` whose length field is `length`.
    fn request_header(length: u32) -> Vec<u8> {
        let mut bytes = length.to_ne_bytes().to_vec();
        bytes.resize(NETLINK_HEADER_BYTES, 0);
        bytes
    }

    #[test]
    fn extended_ack_text_is_read_after_the_echoed_request() {
        let text = nla(NLMSGERR_ATTR_MSG, b"Nexthop has invalid gateway\0");
        let offset = nla(3, &[0; 4]);
        let mut capped = ErrorMessage::default();
        capped.header = [request_header(60), offset.clone(), text.clone()].concat();
        assert_eq!(
            error_message_text(&capped, NLM_F_ACK_TLVS | NLM_F_CAPPED).as_deref(),
            Some("Nexthop has invalid gateway")
        );
        // Uncapped: the whole 22-byte request, padded to 24, is echoed.
        let mut whole = ErrorMessage::default();
        whole.header = [request_header(22), vec![0xff; 8], offset, text].concat();
        assert_eq!(
            error_message_text(&whole, NLM_F_ACK_TLVS).as_deref(),
            Some("Nexthop has invalid gateway")
        );
        assert_eq!(error_message_text(&whole, 0), None);
        assert_eq!(
            error_message_text(&ErrorMessage::default(), NLM_F_ACK_TLVS),
            None
        );
    }

    #[test]
    fn padding_aligns_to_four_bytes() {
        assert_eq!(
            [0, 1, 2, 3, 4, 5, 16, 17].map(padding),
            [0, 3, 2, 1, 0, 3, 0, 3]
        );
    }

    /// Any descriptor will do for the fake, which never reads it.
    fn some_fd() -> std::fs::File {
        std::fs::File::open("/dev/null").unwrap()
    }

    fn fake_veth(index: u32) -> LinkRecord {
        LinkRecord {
            version: LINK_RECORD_VERSION,
            index,
            name: "cnr0".to_owned(),
            kind: VETH_KIND.to_owned(),
            mac: RECORDING_VETH_MAC,
            mtu: RECORDING_VETH_MTU,
            peer_index: Some(RECORDING_VETH_PEER_INDEX),
            peer_namespace_id: Some(RECORDING_VETH_PEER_NAMESPACE_ID),
        }
    }

    fn errno_of(error: &RtnlError) -> Option<i32> {
        match error {
            RtnlError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    #[test]
    fn recording_routes_creates_a_veth_and_deletes_it_by_its_exact_record() {
        use std::os::fd::AsFd;
        let fd = some_fd();
        let fake = RecordingRoutes::new()
            .with_link("lo", 1)
            .with_link("tap0", 7);

        let record = fake.create_veth("cnr0", "cnr1", fd.as_fd()).unwrap();
        assert_eq!(record, fake_veth(8));
        assert_eq!(fake.link_record("cnr0").unwrap(), Some(record.clone()));
        assert_eq!(fake.link_index("cnr0").unwrap(), Some(8));
        assert_eq!(fake.link_record("lo").unwrap(), None);
        assert_eq!(
            fake.link_names().unwrap(),
            BTreeMap::from([
                (1, "lo".to_owned()),
                (7, "tap0".to_owned()),
                (8, "cnr0".to_owned())
            ])
        );
        let duplicate = fake.create_veth("cnr0", "cnr1", fd.as_fd()).unwrap_err();
        assert_eq!(
            errno_of(&duplicate),
            Some(rustix::io::Errno::EXIST.raw_os_error())
        );

        // A different MAC is a different link: refused, and kept.
        let other_mac = LinkRecord {
            mac: [0x02, 0, 0, 0, 0, 0x99],
            ..record.clone()
        };
        let error = fake.delete_link(&other_mac).unwrap_err();
        match &error {
            RtnlError::LinkShapeChanged { expected, found } => {
                assert_eq!(**expected, other_mac);
                assert_eq!(found.as_deref(), Some(&record));
            }
            other => panic!("expected LinkShapeChanged, got {other:?}"),
        }
        assert_eq!(fake.link_record("cnr0").unwrap(), Some(record.clone()));

        fake.delete_link(&record).unwrap();
        assert_eq!(fake.link_record("cnr0").unwrap(), None);
        assert_eq!(fake.link_index("cnr0").unwrap(), None);
        assert_eq!(fake.link_names().unwrap().len(), 2);

        // An absent link is refused too, naming what is missing.
        let error = fake.delete_link(&record).unwrap_err();
        assert!(
            matches!(&error, RtnlError::LinkShapeChanged { found: None, .. }),
            "{error:?}"
        );
        assert!(
            error.to_string().ends_with("but it is now absent"),
            "{error}"
        );

        assert_eq!(
            fake.calls(),
            [
                "create_veth cnr0 cnr1",
                "link_record cnr0",
                "link_index cnr0",
                "link_record lo",
                "link_names",
                "create_veth cnr0 cnr1",
                "delete_link cnr0 index=8",
                "link_record cnr0",
                "delete_link cnr0 index=8",
                "link_record cnr0",
                "link_index cnr0",
                "link_names",
                "delete_link cnr0 index=8",
            ]
        );
    }

    #[test]
    fn recording_routes_refuses_to_delete_a_link_whose_primed_shape_changed() {
        use std::os::fd::AsFd;
        let fd = some_fd();
        let created = RecordingRoutes::new()
            .create_veth("cnr0", "cnr1", fd.as_fd())
            .unwrap();
        let changed = LinkRecord {
            mtu: 9000,
            ..created.clone()
        };
        let fake = RecordingRoutes::new().with_record(changed.clone());
        let error = fake.delete_link(&created).unwrap_err();
        assert!(
            matches!(
                &error,
                RtnlError::LinkShapeChanged { expected, found: Some(found) }
                    if **expected == created && **found == changed
            ),
            "{error:?}"
        );
        // The message names the link and both shapes.
        let text = error.to_string();
        assert!(text.contains("\"cnr0\""), "{text}");
        assert!(text.contains(&created.to_string()), "{text}");
        assert!(text.contains(&changed.to_string()), "{text}");
        assert_eq!(fake.link_record("cnr0").unwrap(), Some(changed.clone()));
        fake.delete_link(&changed).unwrap();
        assert_eq!(fake.link_record("cnr0").unwrap(), None);
    }

    #[test]
    fn recording_routes_delete_route_removes_it_from_observe() {
        let deny = on_link(Ipv4Prefix::new([10, 0, 0, 0], 8));
        let allow = via_gateway(Ipv4Prefix::new([10, 99, 0, 5], 32));
        let fake = RecordingRoutes::new();
        fake.add_address("tap0", Ipv4Addr::new(10, 137, 54, 1), 24)
            .unwrap();
        fake.add_route(&deny).unwrap();
        fake.add_route(&allow).unwrap();
        fake.delete_route(&allow).unwrap();
        assert_eq!(
            fake.observe().unwrap(),
            PolicyProjection::new(vec![deny.clone()], Vec::new(), Vec::new())
        );
        // Deleting a route not installed is the kernel's ESRCH.
        let error = fake.delete_route(&allow).unwrap_err();
        assert!(
            matches!(
                &error,
                RtnlError::Kernel { request: REQUEST_DEL_ROUTE, errno, .. }
                    if *errno == rustix::io::Errno::SRCH.raw_os_error()
            ),
            "{error:?}"
        );
        assert_eq!(
            fake.calls(),
            [
                "add_address tap0 10.137.54.1/24",
                "add_route 10.0.0.0/8 dev tap0 table 254 type 1 priority 0",
                "add_route 10.99.0.5/32 via 10.137.54.2 dev tap0 table 254 type 1 priority 0",
                "delete_route 10.99.0.5/32 via 10.137.54.2 dev tap0 table 254 type 1 priority 0",
                "observe",
                "delete_route 10.99.0.5/32 via 10.137.54.2 dev tap0 table 254 type 1 priority 0",
            ]
        );
    }

    #[test]
    fn add_address_refuses_a_prefix_length_above_32() {
        let fake = RecordingRoutes::new();
        let address = Ipv4Addr::new(10, 137, 55, 1);
        for routes in [&fake as &dyn RouteSys, &NetlinkRoutes] {
            let error = routes.add_address("cnr0", address, 33).unwrap_err();
            assert!(
                matches!(
                    error,
                    RtnlError::PrefixLength { address: a, prefix_len: 33 } if a == address
                ),
                "{error:?}"
            );
        }
        assert_eq!(fake.calls(), Vec::<String>::new());
    }

    #[test]
    fn recording_routes_fails_each_new_call_when_primed_and_changes_nothing() {
        use std::os::fd::AsFd;
        let fd = some_fd();
        let eperm = rustix::io::Errno::PERM.raw_os_error();
        let route = on_link(Ipv4Prefix::new([10, 137, 55, 2], 32));
        let primed = || {
            RecordingRoutes::new()
                .with_link("lo", 1)
                .with_record(fake_veth(5))
        };
        type Call = fn(&RecordingRoutes, BorrowedFd<'_>, &ProjectedRoute) -> Result<(), RtnlError>;
        let cases: [(&str, &str, Call); 6] = [
            ("create_veth cnr9 cnr1", REQUEST_NEW_VETH, |fake, fd, _| {
                fake.create_veth("cnr9", "cnr1", fd).map(drop)
            }),
            ("link_record cnr0", REQUEST_GET_LINK_RECORD, |fake, _, _| {
                fake.link_record("cnr0").map(drop)
            }),
            (
                "delete_link cnr0 index=5",
                REQUEST_DEL_LINK,
                |fake, _, _| fake.delete_link(&fake_veth(5)),
            ),
            (
                "add_address cnr0 10.137.55.1/32",
                REQUEST_NEW_ADDRESS,
                |fake, _, _| fake.add_address("cnr0", Ipv4Addr::new(10, 137, 55, 1), 32),
            ),
            (
                "delete_route 10.137.55.2/32 dev tap0 table 254 type 1 priority 0",
                REQUEST_DEL_ROUTE,
                |fake, _, route| fake.delete_route(route),
            ),
            ("link_names", REQUEST_DUMP_LINKS, |fake, _, _| {
                fake.link_names().map(drop)
            }),
        ];
        for (call, request, run) in cases {
            let fake = primed().failing(call, eperm);
            fake.add_route(&route).unwrap();
            let error = run(&fake, fd.as_fd(), &route).unwrap_err();
            assert!(
                matches!(
                    &error,
                    RtnlError::Kernel { request: r, errno, message: None }
                        if *r == request && *errno == eperm
                ),
                "{call}: {error:?}"
            );
            assert_eq!(fake.calls().last().map(String::as_str), Some(call));
            // Nothing changed: the link, its shape and the route remain, and
            // no link was created.
            let state = fake.state();
            assert_eq!(
                state.records,
                BTreeMap::from([("cnr0".to_owned(), fake_veth(5))]),
                "{call}"
            );
            assert_eq!(state.added, std::slice::from_ref(&route), "{call}");
        }
    }

    /// The identity of the calling thread's network namespace.
    fn namespace_identity() -> (u64, u64) {
        use std::os::unix::fs::MetadataExt;
        let metadata = std::fs::metadata("/proc/thread-self/ns/net").unwrap();
        (metadata.dev(), metadata.ino())
    }

    /// Moves the calling thread into a new network namespace. Requires
    /// CAP_SYS_ADMIN; the tests run as root (CI too), so a refusal fails
    /// the test rather than skipping it.
    fn unshare_network_namespace() {
        // SAFETY: CLONE_NEWNET does not unshare the descriptor table
        // (CLONE_FILES), which is what makes unshare unsafe for Rust's fd
        // ownership; it affects this thread only.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }
            .expect("unshare(CLONE_NEWNET): the tests run as root and need CAP_SYS_ADMIN");
    }

    /// A new network namespace, created by a short-lived thread; the
    /// descriptor keeps it alive.
    fn fresh_namespace() -> std::os::fd::OwnedFd {
        std::thread::spawn(|| {
            unshare_network_namespace();
            std::os::fd::OwnedFd::from(std::fs::File::open("/proc/thread-self/ns/net").unwrap())
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// `body` on a thread that has entered `namespace`.
    fn in_namespace<T: Send>(namespace: BorrowedFd<'_>, body: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    rustix::thread::move_into_link_name_space(
                        namespace,
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    )
                    .expect("setns(CLONE_NEWNET)");
                    body()
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// The real [`NetlinkRoutes`] in a network namespace this test creates
    /// (spec 3.7 "Exact cleanup"): a veth whose peer is created in a second
    /// namespace, its record, an address, a route added and deleted, and
    /// deletion only by the exact record. Every real call runs on the
    /// namespaced thread: NetlinkRoutes acts in the calling thread's
    /// namespace. No traffic is sent.
    #[test]
    fn netlink_routes_create_and_exactly_delete_a_veth_in_a_fresh_namespace() {
        let outer = namespace_identity();
        let inner = std::thread::spawn(|| {
            unshare_network_namespace();
            real_veth_body();
            namespace_identity()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        assert_ne!(inner, outer, "the body ran in the test's namespace");
    }

    fn real_veth_body() {
        use std::os::fd::AsFd;
        let routes = NetlinkRoutes;
        let peer_namespace = fresh_namespace();
        assert_eq!(routes.link_record("cnr0").unwrap(), None);

        let record = routes
            .create_veth("cnr0", "cnr1", peer_namespace.as_fd())
            .unwrap();
        assert_eq!(record.version, LINK_RECORD_VERSION);
        assert_eq!(record.name, "cnr0");
        assert_eq!(record.kind, VETH_KIND);
        assert_ne!(record.mac, [0; 6]);
        assert!(record.mtu > 0, "{record}");
        assert!(record.peer_index.is_some(), "{record}");
        assert!(record.peer_namespace_id.is_some(), "{record}");
        assert_eq!(routes.link_record("cnr0").unwrap(), Some(record.clone()));
        assert_eq!(routes.link_index("cnr0").unwrap(), Some(record.index));
        // The peer is not here but in the peer namespace, with the index
        // the record names, pointing back.
        assert_eq!(routes.link_index("cnr1").unwrap(), None);
        let peer = in_namespace(peer_namespace.as_fd(), || {
            NetlinkRoutes.link_record("cnr1").unwrap()
        })
        .expect("cnr1 in the peer namespace");
        assert_eq!(Some(peer.index), record.peer_index);
        assert_eq!(peer.kind, VETH_KIND);
        assert_eq!(peer.peer_index, Some(record.index));

        let duplicate = routes
            .create_veth("cnr0", "cnr2", peer_namespace.as_fd())
            .unwrap_err();
        assert!(
            matches!(
                &duplicate,
                RtnlError::Kernel { request: REQUEST_NEW_VETH, errno, .. }
                    if *errno == rustix::io::Errno::EXIST.raw_os_error()
            ),
            "{duplicate:?}"
        );

        // A link without IFLA_LINKINFO has no kind.
        let lo = routes.link_record("lo").unwrap().unwrap();
        assert_eq!(
            (lo.kind.as_str(), lo.mac, lo.peer_index),
            ("", [0; 6], None)
        );

        let address = Ipv4Addr::new(10, 137, 55, 1);
        routes.add_address("cnr0", address, 32).unwrap();
        let duplicate = routes.add_address("cnr0", address, 32).unwrap_err();
        assert_eq!(
            errno_of(&duplicate),
            Some(rustix::io::Errno::EXIST.raw_os_error()),
            "{duplicate:?}"
        );
        let unknown = routes.add_address("nope0", address, 32).unwrap_err();
        assert!(
            matches!(&unknown, RtnlError::UnknownDevice { name } if name == "nope0"),
            "{unknown:?}"
        );
        routes.set_link_up("cnr0").unwrap();

        let route = ProjectedRoute {
            destination: Ipv4Prefix::new([10, 137, 55, 2], 32),
            table: RT_TABLE_MAIN,
            route_type: RTN_UNICAST,
            priority: 0,
            next_hop: RouteNextHop::OnLink {
                device: "cnr0".to_owned(),
            },
        };
        routes.add_route(&route).unwrap();
        // A /32 address has no prefix route: the route is all there is.
        assert_eq!(
            routes.observe().unwrap().ipv4_routes,
            std::slice::from_ref(&route)
        );
        routes.delete_route(&route).unwrap();
        assert_eq!(routes.observe().unwrap().ipv4_routes, []);
        let absent = routes.delete_route(&route).unwrap_err();
        assert!(
            matches!(
                &absent,
                RtnlError::Kernel { request: REQUEST_DEL_ROUTE, errno, .. }
                    if *errno == rustix::io::Errno::SRCH.raw_os_error()
            ),
            "{absent:?}"
        );

        let names = routes.link_names().unwrap();
        assert_eq!(names.get(&record.index).map(String::as_str), Some("cnr0"));
        assert_eq!(names.get(&lo.index).map(String::as_str), Some("lo"));
        assert_eq!(names.len(), 2, "{names:?}");

        // An address and the link going up do not change the shape; a
        // record with another MAC is refused and the link kept.
        let mut other_mac = record.clone();
        other_mac.mac[5] ^= 0xff;
        let refused = routes.delete_link(&other_mac).unwrap_err();
        assert!(
            matches!(
                &refused,
                RtnlError::LinkShapeChanged { expected, found: Some(found) }
                    if **expected == other_mac && **found == record
            ),
            "{refused:?}"
        );
        assert_eq!(routes.link_record("cnr0").unwrap(), Some(record.clone()));

        routes.delete_link(&record).unwrap();
        assert_eq!(routes.link_record("cnr0").unwrap(), None);
        // The peer went with it.
        let peer_left = in_namespace(peer_namespace.as_fd(), || {
            NetlinkRoutes.link_index("cnr1").unwrap()
        });
        assert_eq!(peer_left, None);
        let absent = routes.delete_link(&record).unwrap_err();
        assert!(
            matches!(&absent, RtnlError::LinkShapeChanged { found: None, .. }),
            "{absent:?}"
        );
    }
}
