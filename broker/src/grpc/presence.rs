//! `Presence` (§13): who is in a channel, for a backend's API key whose
//! `sub_channels` allow it, priced like the socket's `presence` frame and
//! charged to the key's bucket (the one HTTP and gRPC share).

use tonic::{Response, Status};

use super::proto::{Member, PresenceReply, PresenceRequest};
use super::service::{BrokerService, Caller};
use super::status;
use crate::charge::Refusal;
use crate::protocol::{ErrorCode, channel, frames};

pub(super) async fn call(
    service: &BrokerService,
    caller: Caller,
    req: PresenceRequest,
) -> Result<Response<PresenceReply>, Status> {
    let refuse = |code: ErrorCode, message: String| Refusal { code, message };
    let checked = (|| {
        channel::validate(&req.channel)
            .map_err(|why| refuse(ErrorCode::BadRequest, why.to_owned()))?;
        // gRPC's 0 is "not set": the default.
        let asked = (req.limit != 0).then_some(u64::from(req.limit));
        let limit =
            frames::presence_limit(asked).map_err(|why| refuse(ErrorCode::BadRequest, why))?;
        if !caller.key.subscribe.matches(&req.channel) {
            return Err(refuse(
                ErrorCode::Forbidden,
                format!("this API key's sub_channels do not allow {:?}", req.channel),
            ));
        }
        let config = service.node.config.load();
        if crate::config::presence_rule(&config.namespaces, &req.channel).is_none() {
            return Err(refuse(
                ErrorCode::BadRequest,
                format!("presence is not enabled for {:?}'s namespace", req.channel),
            ));
        }
        Ok(limit)
    })();
    let limit = match checked {
        Ok(l) => l,
        Err(r) => return Err(service.refuse_call(&caller, &r, &req.channel).await),
    };
    let cost = crate::pricing::presence(&caller.limits.costs, limit);
    let admitted = match service.charge(&caller, cost, Some(&req.channel)).await {
        Ok(a) => a,
        Err(refused) => return Err(status::rate_limited(&refused, 0)),
    };
    let read = service
        .node
        .presence
        .read(&req.channel, limit as usize)
        .wait()
        .await;
    let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let mut reply = Response::new(PresenceReply {
        channel: req.channel,
        members: read
            .members
            .iter()
            .map(|m| Member {
                user: m.user.to_string(),
                conn_id: m.conn_id.to_string(),
                info_json: m.info.as_deref().unwrap_or_default().to_owned(),
            })
            .collect(),
        users: clamp(read.counts.users),
        connections: clamp(read.counts.connections),
        partial: read.partial,
    });
    status::balance(
        reply.metadata_mut(),
        &admitted.balance.unwrap_or_default(),
        u64::from(cost),
    );
    Ok(reply)
}
