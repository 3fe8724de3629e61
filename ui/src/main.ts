// The console's shell: sign-in, the list of screens the token's mounts allow, and the screen shown.
import './style.css';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { html } from './html.ts';
import { api, rememberedToken, signIn, signOut, type TokenInfo } from './session.ts';
import { message } from './widgets.ts';
import { Overview } from './screens/overview.ts';
import { StaticRoles } from './screens/static-roles.ts';
import { Library } from './screens/library.ts';
import { LdapConfig } from './screens/ldap-config.ts';
import { DynamicRoles } from './screens/dynamic-roles.ts';
import { Cloud } from './screens/cloud.ts';
import { Leases } from './screens/leases.ts';
import { AuditDevices } from './screens/audit.ts';
import { Activity } from './screens/activity.ts';

export interface Mounts { ldap: string[]; cloud: string[]; all: Record<string, any> }

const SCREENS = [
  { id: 'overview', title: 'Overview', needs: undefined, view: Overview },
  { id: 'static-roles', title: 'LDAP static roles', needs: 'ldap', view: StaticRoles },
  { id: 'library', title: 'Library sets', needs: 'ldap', view: Library },
  { id: 'ldap-config', title: 'LDAP config', needs: 'ldap', view: LdapConfig },
  { id: 'dynamic-roles', title: 'LDAP dynamic roles', needs: 'ldap', view: DynamicRoles },
  { id: 'cloud', title: 'Cloud', needs: 'cloud', view: Cloud },
  { id: 'leases', title: 'Leases', needs: undefined, view: Leases },
  { id: 'audit', title: 'Audit devices', needs: undefined, view: AuditDevices },
  { id: 'activity', title: 'Activity', needs: undefined, view: Activity },
] as const;

function Login({ onSignedIn, ended, notice }: { onSignedIn: (info: TokenInfo) => void; ended: (why: string) => void; notice?: string }) {
  const [token, setToken] = useState('');
  const [remember, setRemember] = useState(false);
  const [error, setError] = useState<string | undefined>();
  const submit = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    try {
      onSignedIn(await signIn(token.trim(), remember, ended));
      setToken('');
    } catch (err) {
      setError(message(err));
    }
  };
  return html`<main class="login">
    <h1>Strongroom console</h1>
    ${notice && html`<p class="muted" role="status">${notice}</p>`}
    <form onSubmit=${submit}>
      <label for="token">Token</label>
      <input id="token" type="password" autocomplete="off" spellcheck="false" required value=${token} onInput=${(e: Event) => setToken((e.target as HTMLInputElement).value)} />
      <label class="inline"><input type="checkbox" checked=${remember} onChange=${(e: Event) => setRemember((e.target as HTMLInputElement).checked)} /> Remember in this tab (sessionStorage, cleared when the tab closes)</label>
      <button type="submit">Sign in</button>
      ${error && html`<p class="error" role="alert">${error}</p>`}
    </form>
    <p class="muted">The token stays in this page's memory, is sent only as X-Vault-Token to /v1, and is dropped after 15 minutes without use.</p>
  </main>`;
}

function Shell({ info, onSignOut }: { info: TokenInfo; onSignOut: (revoke: boolean) => void }) {
  const [screen, setScreen] = useState<string>('overview');
  const [mounts, setMounts] = useState<Mounts>({ ldap: [], cloud: [], all: {} });
  const [revoke, setRevoke] = useState(false);
  useEffect(() => {
    api('GET', 'sys/internal/ui/mounts').then((r) => {
      const secret: Record<string, any> = r?.data?.secret ?? {};
      const of = (types: string[]) => Object.keys(secret).filter((p) => types.includes(secret[p]?.type)).sort();
      setMounts({ ldap: of(['ldap', 'openldap']), cloud: of(['cloud', 'azure']), all: r?.data ?? {} });
    }, () => undefined);
  }, []);
  const shown = SCREENS.filter((s) => s.needs === undefined || mounts[s.needs].length > 0);
  const current = shown.find((s) => s.id === screen) ?? shown[0];
  const View = current.view as any;
  return html`<div class="shell">
    <header>
      <span class="brand">Strongroom</span>
      <span class="who">Signed in as <strong>${info.display_name || 'token'}</strong> (${info.policies.join(', ')})</span>
      <label class="inline"><input type="checkbox" checked=${revoke} onChange=${(e: Event) => setRevoke((e.target as HTMLInputElement).checked)} /> revoke the token</label>
      <button onClick=${() => onSignOut(revoke)}>Sign out</button>
    </header>
    <nav aria-label="Screens"><ul>
      ${shown.map((s) => html`<li key=${s.id}><button aria-current=${s.id === current.id ? 'page' : undefined} onClick=${() => setScreen(s.id)}>${s.title}</button></li>`)}
    </ul></nav>
    <main id="main" tabindex="-1">
      <h1>${current.title}</h1>
      <${View} key=${current.id} mounts=${mounts} />
    </main>
  </div>`;
}

function App() {
  const [info, setInfo] = useState<TokenInfo | undefined>();
  const [notice, setNotice] = useState<string | undefined>();
  const ended = (why: string) => {
    setInfo(undefined);
    setNotice(why);
  };
  useEffect(() => {
    const remembered = rememberedToken();
    if (remembered) signIn(remembered, true, ended).then(setInfo, () => setNotice('The remembered token is no longer valid.'));
  }, []);
  if (!info) return html`<${Login} notice=${notice} ended=${ended} onSignedIn=${(i: TokenInfo) => { setNotice(undefined); setInfo(i); }} />`;
  return html`<${Shell} info=${info} onSignOut=${(revoke: boolean) => void signOut(revoke)} />`;
}

render(html`<${App} />`, document.getElementById('app')!);
