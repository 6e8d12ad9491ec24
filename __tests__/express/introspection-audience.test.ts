/**
 * RFC 7662 §4 with RFC 8707: an introspecting resource server learns of the
 * tokens meant for it, those of its own resources (the default audience for
 * a client registered without a list); another API's token is exactly
 * { active: false } for it (the research note's IN4, "not its audience").
 */
import request from 'supertest';
import { setup, type TestSetup } from '../helpers/app';

const DEFAULT = 'https://orders.test';
const API_A = 'https://api-a.test';
const API_B = 'https://api-b.test';

type Client = { clientId: string; clientSecret: string };
let t: TestSetup;
let holder: Client;
let rsA: Client;
let rsDefault: Client;
let rsAandB: Client;

beforeAll(async () => {
  t = await setup({ audience: DEFAULT, resources: [API_A, API_B] });
  holder = await t.issuer.clients.create({ name: 'caller', resources: [DEFAULT, API_A, API_B] });
  rsA = await t.issuer.clients.create({ name: 'api-a', permissions: ['introspect'], resources: [API_A] });
  rsDefault = await t.issuer.clients.create({ name: 'orders', permissions: ['introspect'] });
  rsAandB = await t.issuer.clients.create({ name: 'gateway', permissions: ['introspect'], resources: [API_A, API_B] });
});

afterAll(async () => {
  await t.close();
});

async function tokenFor(resource?: string): Promise<string> {
  const form: Record<string, string> = { grant_type: 'client_credentials' };
  if (resource) form.resource = resource;
  const res = await request(t.app).post('/oauth/token').auth(holder.clientId, holder.clientSecret).type('form').send(form);
  expect(res.status).toBe(200);
  return res.body.access_token as string;
}

const introspect = (rs: Client, token: string) => request(t.app).post('/oauth/introspect').auth(rs.clientId, rs.clientSecret).type('form').send({ token });

test("a token for API A: active for API A's and a gateway's introspection, inactive for the default API's", async () => {
  const token = await tokenFor(API_A);
  const a = await introspect(rsA, token);
  expect(a.status).toBe(200);
  expect(a.body).toMatchObject({ active: true, aud: API_A, client_id: holder.clientId });
  expect((await introspect(rsAandB, token)).body).toMatchObject({ active: true, aud: API_A });
  const other = await introspect(rsDefault, token);
  expect(other.status).toBe(200);
  expect(other.body).toEqual({ active: false });
});

test('a token for the default audience: active for a client registered without resources, inactive for the others', async () => {
  const token = await tokenFor();
  expect((await introspect(rsDefault, token)).body).toMatchObject({ active: true, aud: DEFAULT });
  expect((await introspect(rsA, token)).body).toEqual({ active: false });
  expect((await introspect(rsAandB, token)).body).toEqual({ active: false });
});
