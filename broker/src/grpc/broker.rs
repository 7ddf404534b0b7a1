//! The `tidegate.v1.Broker` service as tonic calls it: each rpc admits its
//! caller on the shared [`BrokerService`] and hands the call to its own
//! module (`publish_stream.rs`, `subscribe.rs`, `presence.rs`); a unary
//! publish is answered here.

use tonic::{Request, Response, Status};

use super::proto::broker_server::Broker;
use super::proto::{
    PresenceReply, PresenceRequest, PublishReply, PublishRequest, SubscribeRequest,
};
use super::service::BrokerService;
use super::status;

#[tonic::async_trait]
impl Broker for BrokerService {
    async fn publish(
        &self,
        request: Request<PublishRequest>,
    ) -> Result<Response<PublishReply>, Status> {
        let _open = self.open_stream();
        let caller = self.admit(&request)?;
        let msg = request.into_inner();
        let cost = match self.price(&caller, &msg) {
            Ok(cost) => cost,
            Err(r) => return Err(self.refuse_call(&caller, &r, &msg.channel).await),
        };
        let admitted = match self.charge_publish(&caller, cost, &msg.channel).await {
            Ok(a) => a,
            Err(refused) => return Err(status::rate_limited(&refused, 0)),
        };
        let (published, cost, balance) = self
            .publish_message(&caller, &msg, cost, admitted.balance)
            .await;
        let mut reply = Response::new(PublishReply {
            id: msg.id,
            seq: published.seq,
            error: None,
            duplicate: published.duplicate,
        });
        status::balance(
            reply.metadata_mut(),
            &balance.unwrap_or_default(),
            u64::from(cost),
        );
        Ok(reply)
    }

    type PublishStreamStream = super::publish_stream::Replies;

    async fn publish_stream(
        &self,
        request: Request<tonic::Streaming<PublishRequest>>,
    ) -> Result<Response<Self::PublishStreamStream>, Status> {
        let caller = self.admit(&request)?;
        let ip = request.remote_addr().map(|a| a.ip());
        Ok(Response::new(super::publish_stream::start(
            self.clone(),
            caller,
            ip,
            request.into_inner(),
        )))
    }

    type SubscribeStream = super::subscribe::Events;

    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let caller = self.admit(&request)?;
        let ip = request.remote_addr().map(|a| a.ip());
        super::subscribe::start(self, caller, ip, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn presence(
        &self,
        request: Request<PresenceRequest>,
    ) -> Result<Response<PresenceReply>, Status> {
        let _open = self.open_stream();
        let caller = self.admit(&request)?;
        super::presence::call(self, caller, request.into_inner()).await
    }
}
