// Anthropic's TypeScript SDK (@anthropic-ai/sdk), unchanged, against a base URL: the calls
// tests/http/test_anthropic_sdk_ts.py asks for. Reads {baseURL, apiKey, calls: [{op, params}]}
// on stdin; prints one JSON result per call, in order: {message} for create and
// count_tokens, {message, text, events} for stream (finalMessage, the text its `text` events
// carried, the event types), {models} for models.list, or {error} for a call the SDK threw on.
'use strict';

const Anthropic = require('@anthropic-ai/sdk');

async function call(client, op, params) {
  if (op === 'create') {
    return { message: await client.messages.create(params) };
  }
  if (op === 'count_tokens') {
    return { message: await client.messages.countTokens(params) };
  }
  if (op === 'models') {
    const page = await client.models.list();
    return { models: page.data };
  }
  if (op === 'stream') {
    const stream = client.messages.stream(params);
    const events = [];
    let text = '';
    stream.on('streamEvent', (event) => events.push(event.type));
    stream.on('text', (delta) => {
      text += delta;
    });
    const message = await stream.finalMessage();
    return { message, text, events };
  }
  throw new Error(`unknown op ${op}`);
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const { baseURL, apiKey, calls } = JSON.parse(Buffer.concat(chunks).toString());
  const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
  const results = [];
  for (const { op, params } of calls) {
    try {
      results.push(await call(client, op, params));
    } catch (error) {
      if (!(error instanceof Anthropic.APIError)) throw error;
      results.push({
        error: {
          class: error.constructor.name,
          status: error.status,
          body: error.error,
          requestID: error.requestID,
          retryAfter: error.headers ? error.headers.get('retry-after') : null,
        },
      });
    }
  }
  process.stdout.write(JSON.stringify(results));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
