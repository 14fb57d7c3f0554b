package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/pgoutbox/outbox/mqtt"
	"github.com/pgoutbox/outbox/pubsub"
)

// Figure 5's Pub/Sub and MQTT drains.
const (
	pubPubSub = "pubsub"
	pubMQTT   = "mqtt"
	// benchProject is the Pub/Sub project of the drains' topics.
	benchProject = "pgoutbox-bench"
	// defaultMQTTURL is --mqtt-url's default without $MQTT_URL.
	defaultMQTTURL = "mqtt://127.0.0.1:1883"
)

// openPubSub starts pstest, the Pub/Sub client's in-process fake (unless a
// test gave one), and an admin client that creates, counts and removes the
// drains' topics.
func (h *harness) openPubSub(ctx context.Context) error {
	b := &h.brokers
	srv := h.opt.pubsubServer
	if srv == nil {
		srv = pstest.NewServer()
		b.pubsubFake = srv
	}
	b.pubsubAddr = srv.Addr
	c, err := gpubsub.NewClient(ctx, benchProject, pubsub.DialConfig{Emulator: srv.Addr}.ClientOptions()...)
	if err != nil {
		return fmt.Errorf("pstest client: %w", err)
	}
	b.pubsub = c
	return nil
}

// openMQTT checks the MQTT broker answers, so a broker that is down fails
// the run with its name at once.
func (h *harness) openMQTT() error {
	opts, err := h.mqttOptions("pgoutbox-bench-check-" + randHex(4))
	if err != nil {
		return err
	}
	c := paho.NewClient(opts)
	t := c.Connect()
	if !t.WaitTimeout(brokerDialTimeout) || t.Error() != nil {
		u, _ := url.Parse(h.mqttURL())
		return fmt.Errorf("MQTT broker at %s (--mqtt-url) is not reachable: %v; start it, or leave mqtt out of --brokers", u.Redacted(), t.Error())
	}
	c.Disconnect(100)
	return nil
}

// mqttURL is --mqtt-url, or its default.
func (h *harness) mqttURL() string { return cmp.Or(h.opt.MQTTURL, defaultMQTTURL) }

func (h *harness) mqttOptions(clientID string) (*paho.ClientOptions, error) {
	u, err := url.Parse(h.mqttURL())
	if err != nil {
		return nil, fmt.Errorf("--mqtt-url: %w", err)
	}
	opts, err := mqtt.ClientOptionsFromURL(u, nil)
	if err != nil {
		return nil, fmt.Errorf("--mqtt-url: %w", err)
	}
	return opts.SetClientID(clientID).SetConnectTimeout(brokerDialTimeout), nil
}

func (h *harness) closePubSub() {
	b := &h.brokers
	if b.pubsub != nil {
		_ = b.pubsub.Close()
	}
	if b.pubsubFake != nil {
		_ = b.pubsubFake.Close()
	}
}

// pubsubDestination creates topic name on pstest; its count is the messages
// pstest stored for it.
func (h *harness) pubsubDestination(ctx context.Context, spec *relaySpec, name string) (*destination, error) {
	b := &h.brokers
	topic := "projects/" + benchProject + "/topics/" + name
	if _, err := b.pubsub.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: topic}); err != nil {
		return nil, fmt.Errorf("Pub/Sub: create topic %s: %w", name, err)
	}
	srv := b.pubsubFake
	if srv == nil {
		srv = h.opt.pubsubServer
	}
	spec.BrokerURL, spec.Target = b.pubsubAddr, name
	return &destination{what: "Pub/Sub topic " + name,
		count: func(context.Context) (int64, error) {
			var n int64
			for _, m := range srv.Messages() {
				if m.Topic == topic {
					n++
				}
			}
			return n, nil
		},
		remove: func(ctx context.Context) error {
			return b.pubsub.TopicAdminClient.DeleteTopic(ctx, &pb.DeleteTopicRequest{Topic: topic})
		}}, nil
}

// mqttDestination subscribes a counting client (clean session, QoS 1) to
// topic name before the drain: MQTT keeps nothing for a topic nobody
// subscribes to. Its count is the messages it received.
func (h *harness) mqttDestination(_ context.Context, spec *relaySpec, name string) (*destination, error) {
	opts, err := h.mqttOptions(name + "-count")
	if err != nil {
		return nil, err
	}
	var n atomic.Int64
	c := paho.NewClient(opts)
	if t := c.Connect(); !t.WaitTimeout(brokerDialTimeout) || t.Error() != nil {
		return nil, fmt.Errorf("MQTT: connect the counting subscriber: %v", t.Error())
	}
	if t := c.Subscribe(name, 1, func(paho.Client, paho.Message) { n.Add(1) }); !t.WaitTimeout(brokerDialTimeout) || t.Error() != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("MQTT: subscribe to %s: %v", name, t.Error())
	}
	spec.BrokerURL, spec.Target = h.mqttURL(), name
	return &destination{what: "MQTT topic " + name,
		count:  func(context.Context) (int64, error) { return n.Load(), nil },
		remove: func(context.Context) error { c.Disconnect(100); return nil }}, nil
}

// pubsubPublisher is the drain's Pub/Sub publisher, on a client of its own
// for pstest at spec.BrokerURL.
func pubsubPublisher(spec relaySpec) (*pubsub.Publisher, error) {
	return pubsub.Dial(context.Background(), pubsub.DialConfig{Project: benchProject, Emulator: spec.BrokerURL},
		pubsub.Config{Topic: spec.Target})
}

// mqttPublisher is the drain's MQTT publisher; it waits until connected,
// so the drain measures publishing, not the first connection.
func mqttPublisher(spec relaySpec) (*mqtt.Publisher, error) {
	u, err := url.Parse(spec.BrokerURL)
	if err != nil {
		return nil, err
	}
	opts, cfg, err := mqtt.ParseURL(u)
	if err != nil {
		return nil, err
	}
	cfg.Topic = spec.Target
	p, err := mqtt.New(opts, cfg)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(brokerDialTimeout)
	for p.Health(context.Background()) != nil {
		if time.Now().After(deadline) {
			_ = p.Close()
			return nil, errors.New("mqtt: not connected after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p, nil
}
